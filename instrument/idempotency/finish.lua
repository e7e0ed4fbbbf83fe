-- finish.lua: end the attempt that owns the key, storing its result or
-- releasing the key for a retry.
--
-- KEYS[1] the record (see begin.lua).
-- ARGV[1] owner token of the attempt.
-- ARGV[2] 'done' to store the result, 'free' to release (fn failed).
-- ARGV[3] the result body ('done' only).
-- ARGV[4] '1' when the result was refused as too large ('done' only): the
--         effect happened, so retries must get an error, not run fn again.
-- ARGV[5] record TTL in milliseconds ('done' only).
--
-- Returns 1, or 0 when the attempt no longer owns the key (a successor
-- claimed it after the lease ran out): its result is dropped, since the
-- successor's is the one replayed.
--
-- The owner token stays in the record after the attempt ends, so that a
-- resend of this call (go-redis resends a command whose reply was lost)
-- finds its own finished record and returns 1 again instead of reporting
-- the lease lost. A successor's begin.lua replaces the token.
local st = redis.call('HGET', KEYS[1], 'st')
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
	return 0
end
if st ~= 'running' then
	return 1 -- an earlier try of this call finished it
end
redis.call('HDEL', KEYS[1], 'until')
if ARGV[2] == 'done' then
	redis.call('HSET', KEYS[1], 'st', 'done', 'body', ARGV[3], 'big', ARGV[4])
	redis.call('PEXPIRE', KEYS[1], ARGV[5])
else
	redis.call('HSET', KEYS[1], 'st', 'free')
end
return 1
