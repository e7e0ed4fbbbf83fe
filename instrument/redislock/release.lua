-- release.lua: give the lock up only if this token owns it: hand it to the
-- first live waiter (handoff_lib.lua) or delete it, and leave a short-lived
-- tombstone that only this token can recognise. acquire_lib.lua and
-- handoff_lib.lua go where the "#include" line is, on the one path that
-- calls them: Lua makes a closure for each of their functions every time
-- it runs past their definitions, and most releases have no waiter
-- (measured: docs/BENCHMARKS.md, "redis-server's instructions").
--
-- KEYS[1]  lock key
-- KEYS[2]  this token's tombstone key (same hash slot as KEYS[1])
-- KEYS[3]  the waiter queue (entries, oldest first); absent in quorum mode
-- KEYS[4]  fence counter key
-- KEYS[5]  waiter deadlines
-- ARGV[1]  owner token followed by one space
-- ARGV[2]  release notification channel
-- ARGV[3]  tombstone TTL in milliseconds: as long as the calling client can
--          still retry this call
-- ARGV[4]  fence retention in milliseconds (the counter lives the next
--          holder's TTL plus this)
--
-- Returns 1 when released, 2 when this token's lock was already released by
-- an earlier try of this same call, 0 when the lock is absent or owned by
-- another token (nothing is touched then: A never deletes B's lock).
--
-- Why the tombstone: go-redis retries a command whose reply was lost (read
-- timeout) on a new connection. The retry finds the key gone, or already
-- the next holder's (handed over by the first try); without a trace of the
-- first try that reads as "not held", the lease is reported lost and
-- instrument.Do returns ErrLockLost although the work finished under the
-- lock. A lock that disappeared by expiry or someone else's DEL leaves no
-- tombstone: that stays a loss. The retry never hands the lock over again:
-- it no longer owns it.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
	local first = KEYS[3] and redis.call('LPOP', KEYS[3])
	if first then
		-- #include acquire_lib.lua handoff_lib.lua
		hand_over(KEYS[1], KEYS[4], KEYS[3], KEYS[5], ARGV[2], tonumber(ARGV[4]), first)
	else
		redis.call('DEL', KEYS[1])
	end
	return 1
end
if redis.call('EXISTS', KEYS[2]) == 1 then
	return 2
end
return 0
