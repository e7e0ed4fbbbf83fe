-- take.lua: take up to an amount out of one bucket (Rebalance).
--
-- KEYS[1] the bucket: a hash whose field "remain" holds the balance.
-- ARGV[1] the most to take, a decimal integer >= 1.
--
-- Returns the amount taken: min(ARGV[1], balance), 0 for a missing or
-- empty bucket. Taking and reading in one step means a deduction running
-- at the same time can never drive the bucket below zero.
local remain = tonumber(redis.call('HGET', KEYS[1], 'remain') or '0')
local take = math.min(remain, tonumber(ARGV[1]))
if take <= 0 then
	return 0
end
redis.call('HINCRBY', KEYS[1], 'remain', -take)
return take
