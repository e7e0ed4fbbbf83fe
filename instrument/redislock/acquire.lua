-- acquire.lua: take the lock if it is free, in one round trip.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key (same hash slot as KEYS[1])
-- ARGV[1]  owner token followed by one space (the prefix every owner check compares)
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  metadata: a JSON object without its closing brace
-- ARGV[4]  fence counter TTL in milliseconds (TTL + retention)
--
-- Returns {1, fence} when acquired (also when this token already holds it,
-- so a retried call whose reply was lost is idempotent; the TTL is then
-- re-armed), or {0, pttl, fence} with the holder's remaining TTL in
-- milliseconds and the fence this attempt consumed (quorum mode takes the
-- largest over all nodes).
--
-- The lock value is "<token> <fence> <json>": the token first so that the
-- owner check is a prefix compare, the fence second so that the agent and
-- the idempotent path read it without a JSON parser.
--
-- Needs Redis 6.2 or later (SET ... GET).

-- The next fence: max(counter + 1, server time in microseconds), and the
-- counter moved up to it, on every attempt. The counter alone is not
-- enough: a promoted replica that lagged, a restart from an older RDB
-- snapshot or a crash under appendfsync everysec leaves a counter that is
-- present but stale, and counting on from it repeats fences already
-- issued. The clock is what survives those losses: every fence issued
-- before them is at most the clock of the server that issued it (the
-- counter only trails the clock: one per acquisition against a million a
-- second), so as long as server clocks do not step back, and the promoted
-- replica's clock is not behind the lost primary's by more than the
-- failover took, the clock alone is above them. The counter covers what the
-- clock cannot: two attempts in one microsecond, or a clock that stepped
-- back by less than the counter's lifetime.
--
-- One SET ... GET writes the clock and reads the old counter; only when the
-- counter is ahead of the clock (rare: see above) is it written again. The
-- counter is under a TTL (TTL + retention, re-armed on every attempt), so a
-- lock key leaves no permanent key behind. A failed attempt also consumes a
-- fence (quorum mode takes the largest over all nodes it reached); fences
-- need only increase, not be dense. Lua numbers are doubles: microseconds
-- (~1.8e15) are exact below 2^53, and %.0f prints them without an exponent.
local t = redis.call('TIME')
local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
local f = string.format('%.0f', fence)
local prev = tonumber(redis.call('SET', KEYS[2], f, 'PX', ARGV[4], 'GET'))
if prev and prev >= fence then
	fence = prev + 1
	f = string.format('%.0f', fence)
	redis.call('SET', KEYS[2], f, 'PX', ARGV[4])
end

if redis.call('SET', KEYS[1], ARGV[1] .. f .. ' ' .. ARGV[3] .. ',"fence":' .. f .. '}', 'NX', 'PX', ARGV[2]) then
	return {1, fence}
end

-- This token already holds it: an earlier try of the same Acquire ran here
-- but its reply was lost (a go-redis retry, or an earlier quorum attempt
-- whose node timed out). Re-arm the TTL: quorum mode counts the lease valid
-- for a TTL from this attempt's start, so the key must live a TTL from now,
-- not from the earlier try.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	local rest = string.sub(cur, #ARGV[1] + 1)
	return {1, tonumber(string.match(rest, '^(%d+)'))}
end
return {0, redis.call('PTTL', KEYS[1]), fence}
