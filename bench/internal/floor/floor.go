// Package floor holds what the runner and scriptcost both measure as the
// least a pub/sub handoff can cost, so that the two measure the same thing.
package floor

import "github.com/redis/go-redis/v9"

// Handoff is the least a pub/sub handoff can cost: one script that writes
// what a release writes (the next holder's lock value, a tombstone, a queue
// pop, the fence) and publishes, sent by one client and heard by another's
// subscriber.
//
// KEYS: lock, tombstone, queue, fence. ARGV: channel, the next holder's
// value, the lock's TTL and the tombstone's TTL in milliseconds.
var Handoff = redis.NewScript(`redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[3])
redis.call('set', KEYS[2], '1', 'px', ARGV[4])
redis.call('lpop', KEYS[3])
redis.call('incr', KEYS[4])
return redis.call('publish', ARGV[1], ARGV[2])`)
