-- begin.lua: claim an idempotency key for one attempt, or report why not.
--
-- KEYS[1] the record: a hash with fields st (running, done, free), owner,
--         until (lease end, ms of the server's clock), n (attempts so far),
--         fp (fingerprint), body (stored result), big (1 when the result
--         was refused as too large).
-- ARGV[1] owner token of this attempt (random per attempt).
-- ARGV[2] lease in milliseconds.
-- ARGV[3] fingerprint of the request.
-- ARGV[4] record TTL in milliseconds (the result TTL; always above the lease).
--
-- Returns one of:
--   {'run', n}           this attempt owns the key; n is its attempt number
--   {'done', body, big}  completed before: replay body (big = '1': refused)
--   {'busy', ms}         another owner's lease runs ms more milliseconds
--   {'mismatch'}         the key was first used with another fingerprint
--
-- The lease is compared with the server's clock (TIME), not the callers',
-- so clients with skewed clocks agree on when an owner is presumed dead.
-- A record whose lease ran out is claimed like a free one: n goes up, so
-- the new attempt's fence is above the dead owner's.
local st = redis.call('HGET', KEYS[1], 'st')
if st then
	if redis.call('HGET', KEYS[1], 'fp') ~= ARGV[3] then
		return {'mismatch'}
	end
	if st == 'done' then
		local f = redis.call('HMGET', KEYS[1], 'body', 'big')
		return {'done', f[1] or '', f[2] or '0'}
	end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if st == 'running' and redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
	-- An earlier try of this call claimed the key (go-redis resent it
	-- after its reply was lost): run, with the same attempt number.
	redis.call('HSET', KEYS[1], 'until', now + tonumber(ARGV[2]))
	return {'run', tonumber(redis.call('HGET', KEYS[1], 'n'))}
end
if st == 'running' then
	local left = tonumber(redis.call('HGET', KEYS[1], 'until')) - now
	if left > 0 then
		return {'busy', left}
	end
end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HSET', KEYS[1], 'st', 'running', 'owner', ARGV[1],
	'until', now + tonumber(ARGV[2]), 'fp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {'run', n}
