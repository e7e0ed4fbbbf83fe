-- deduct.lua: deduct an amount from one bucket at most once per request id.
--
-- KEYS[1] the bucket: a hash whose field "remain" holds the balance (one
--         shard in sharded mode).
-- KEYS[2] the request-id record of this bucket. It shares KEYS[1]'s hash
--         tag, so both sit in one slot and this script stays one atomic
--         step on a Cluster.
-- ARGV[1] amount, a decimal integer in 1..2^53-1 (checked by the caller).
-- ARGV[2] record TTL in milliseconds.
--
-- Returns {replayed, remaining}: replayed is 1 when the record already
-- existed (a retry) and 0 when this call decided; remaining is the balance
-- after the deduction, or -1 when the bucket did not hold the amount.
-- Errors "quota: request id reused with another amount" when the record
-- was written for a different amount.
--
-- Why the record is written on both outcomes: a retry must get the first
-- answer. In sharded mode a request that found this shard short moved on
-- to the next one; if a refund later filled this shard, a retry that
-- deducted here would apply the request twice. The -1 record sends the
-- retry on to the shard that did apply it.
local rec = redis.call('GET', KEYS[2])
if rec then
	local amount, remaining = string.match(rec, '^(%d+):(-?%d+)$')
	if amount ~= ARGV[1] then
		return redis.error_reply('quota: request id reused with another amount')
	end
	return {1, tonumber(remaining)}
end
local need = tonumber(ARGV[1])
local remain = tonumber(redis.call('HGET', KEYS[1], 'remain') or '-1')
local out = -1
if remain >= need then
	out = redis.call('HINCRBY', KEYS[1], 'remain', -need)
end
-- %d, not "..": Lua 5.1 prints numbers over 1e14 with an exponent.
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. string.format('%d', out), 'PX', ARGV[2])
return {0, out}
