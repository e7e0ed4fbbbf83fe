-- renew.lua: extend the lease of the attempt that owns the key.
--
-- KEYS[1] the record (see begin.lua).
-- ARGV[1] owner token of the attempt.
-- ARGV[2] lease in milliseconds.
--
-- Returns 1 when renewed, 0 when the attempt no longer owns the key (its
-- lease ran out and another attempt claimed it, or the record expired):
-- the owner check keeps a slow owner from extending a successor's lease.
if redis.call('HGET', KEYS[1], 'st') ~= 'running' or redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
	return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'until', now + tonumber(ARGV[2]))
return 1
