-- release.lua: delete the lock only if this token owns it, tell waiters, and
-- leave a short-lived tombstone that only this token can recognise.
--
-- KEYS[1]  lock key
-- KEYS[2]  this token's tombstone key (same hash slot as KEYS[1])
-- KEYS[3]  fair mode only: the queue (a list of waiter tokens, oldest first)
-- ARGV[1]  owner token followed by one space
-- ARGV[2]  release notification channel
-- ARGV[3]  tombstone TTL in milliseconds: as long as the calling client can
--          still retry this call
--
-- Returns 1 when released, 2 when this token's lock was already released by
-- an earlier try of this same call, 0 when the lock is absent or owned by
-- another token (nothing is touched then: A never deletes B's lock).
--
-- The notification is empty (every waiter wakes), or in fair mode the token
-- of the waiter at the head of the queue ('' when nobody waits), so only
-- that waiter wakes and the others keep their place.
--
-- Why the tombstone: go-redis retries a command whose reply was lost (read
-- timeout) on a new connection. The retry finds the key gone, or already
-- the next holder's; without a trace of the first try that reads as "not
-- held", the lease is reported lost and instrument.Do returns ErrLockLost
-- although the work finished under the lock. A lock that disappeared by
-- expiry or someone else's DEL leaves no tombstone: that stays a loss.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
	local head = ''
	if KEYS[3] then
		head = redis.call('LINDEX', KEYS[3], 0) or ''
	end
	redis.call('PUBLISH', ARGV[2], head)
	return 1
end
if redis.call('EXISTS', KEYS[2]) == 1 then
	return 2
end
return 0
