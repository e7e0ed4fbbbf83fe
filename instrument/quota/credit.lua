-- credit.lua: add an amount to one bucket, at most once per record.
--
-- KEYS[1] the bucket: a hash whose field "remain" holds the balance.
-- KEYS[2] the record; same hash tag as KEYS[1]. Refund's is its request
--         id's; Add and Rebalance make a random one per call, so that
--         go-redis resending the call after a lost reply credits once.
-- ARGV[1] amount, a decimal integer in 1..2^53-1 (checked by the caller).
-- ARGV[2] the largest balance allowed (2^53-1: Lua numbers are doubles,
--         so a larger balance could no longer be compared exactly).
-- ARGV[3] record TTL in milliseconds.
--
-- Returns {replayed, remaining}: replayed is 1 when the record already
-- existed, remaining the balance after the credit (for a replay: the
-- balance the first call returned).
-- Errors "quota: request id reused with another amount" and
-- "quota: balance would overflow" (nothing written).
local rec = redis.call('GET', KEYS[2])
if rec then
	local amount, remaining = string.match(rec, '^(%d+):(-?%d+)$')
	if amount ~= ARGV[1] then
		return redis.error_reply('quota: request id reused with another amount')
	end
	return {1, tonumber(remaining)}
end
local remain = tonumber(redis.call('HGET', KEYS[1], 'remain') or '0')
if remain + tonumber(ARGV[1]) > tonumber(ARGV[2]) then
	return redis.error_reply('quota: balance would overflow')
end
local out = redis.call('HINCRBY', KEYS[1], 'remain', ARGV[1])
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. string.format('%d', out), 'PX', ARGV[3])
return {0, out}
