-- renew.lua: extend the lease of the attempt that owns the key.
--
-- KEYS[1] the record (see begin.lua).
-- ARGV[1] owner token of the attempt.
-- ARGV[2] lease in milliseconds.
-- ARGV[3] record TTL in milliseconds (the result TTL; always above the lease).
--
-- Returns 1 when renewed, 0 when the attempt no longer owns the key (its
-- lease ran out and another attempt claimed it, or the record expired):
-- the owner check keeps a slow owner from extending a successor's lease.
--
-- The record's TTL is re-armed too: a record lives the result TTL from its
-- last renewal, not from its claim. Without it, an owner whose fn ran
-- longer than the result TTL, renewing all along, lost its record while it
-- still ran; the next Do claimed the key anew with attempt number 1, the
-- live owner's own fence, and ran fn a second time beside it.
if redis.call('HGET', KEYS[1], 'st') ~= 'running' or redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
	return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'until', now + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
