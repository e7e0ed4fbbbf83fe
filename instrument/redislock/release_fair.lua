-- release_fair.lua: delete the lock only if this token owns it, tell the
-- waiter at the head of the queue that it is its turn, and leave this
-- token's tombstone (see release.lua).
--
-- KEYS[1]  lock key
-- KEYS[2]  queue
-- KEYS[3]  this token's tombstone key
-- ARGV[1]  owner token followed by one space
-- ARGV[2]  release notification channel
-- ARGV[3]  tombstone TTL in milliseconds
--
-- The message is the head waiter's token ('' when nobody waits), so only
-- that waiter wakes; the others keep their place.
--
-- Returns 1 when released, 2 when an earlier try of this same call already
-- released it (its reply lost, the client retried), 0 when the lock is
-- absent or owned by another token.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
	redis.call('PUBLISH', ARGV[2], redis.call('LINDEX', KEYS[2], 0) or '')
	return 1
end
if redis.call('EXISTS', KEYS[3]) == 1 then
	return 2
end
return 0
