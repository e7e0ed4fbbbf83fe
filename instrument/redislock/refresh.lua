-- refresh.lua: extend the lock only if this token owns it. Never a bare
-- EXPIRE: that would extend whoever holds the key now.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token followed by one space
-- ARGV[2]  lease TTL in milliseconds
--
-- Returns 1 when extended, 0 when the lock is absent or owned by another token.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return 0
