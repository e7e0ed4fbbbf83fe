-- release.lua: delete the lock only if this token owns it, and tell waiters.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token followed by one space
-- ARGV[2]  release notification channel
--
-- Returns 1 when released, 0 when the lock is absent or owned by another
-- token (nothing is touched then: A never deletes B's lock).
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	redis.call('PUBLISH', ARGV[2], '')
	return 1
end
return 0
