-- take.lua: take up to an amount out of one bucket (Rebalance), at most once
-- per call.
--
-- KEYS[1] the bucket: a hash whose field "remain" holds the balance.
-- KEYS[2] this call's record (same hash tag as KEYS[1]): a random id per
--         Rebalance step, so that go-redis resending the call after a lost
--         reply finds it.
-- ARGV[1] the most to take, a decimal integer >= 1.
-- ARGV[2] record TTL in milliseconds: as long as the call can be resent.
--
-- Returns the amount taken: min(ARGV[1], balance), 0 for a missing or
-- empty bucket; for a resend, what the first run took (and nothing more is
-- taken: the caller credits only the amount it hears, so a second take
-- would lose the first one's units). Taking and reading in one step means
-- a deduction running at the same time can never drive the bucket below
-- zero.
local rec = redis.call('GET', KEYS[2])
if rec then
	return tonumber(rec)
end
local remain = tonumber(redis.call('HGET', KEYS[1], 'remain') or '0')
local take = math.max(math.min(remain, tonumber(ARGV[1])), 0)
if take > 0 then
	redis.call('HINCRBY', KEYS[1], 'remain', -take)
end
redis.call('SET', KEYS[2], string.format('%d', take), 'PX', ARGV[2])
return take
