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
-- so a retried call whose reply was lost is idempotent), or {0, pttl, fence}
-- with the holder's remaining TTL in milliseconds and the fence this attempt
-- consumed (quorum mode takes the largest over all nodes).
--
-- The lock value is "<token> <fence> <json>": the token first so that the
-- owner check is a prefix compare, the fence second so that the agent and
-- the idempotent path read it without a JSON parser.

-- The next fence. Fences must increase forever without a key that lives
-- forever. The counter is created with a TTL (TTL + retention) and never
-- extended: when it is gone (INCR answers 1) it is seeded from the server
-- clock in microseconds. A counter only ever trails that clock (one
-- increment per acquisition, a million microseconds a second), so the seed
-- is above every fence issued before, unless the server clock stepped back
-- by more than the counter's lifetime. A failed attempt also consumes a
-- fence; fences need only increase, not be dense.
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
	local t = redis.call('TIME')
	fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
	redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[4])
end
local f = string.format('%.0f', fence)

if redis.call('SET', KEYS[1], ARGV[1] .. f .. ' ' .. ARGV[3] .. ',"fence":' .. f .. '}', 'NX', 'PX', ARGV[2]) then
	return {1, fence}
end

local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	local rest = string.sub(cur, #ARGV[1] + 1)
	return {1, tonumber(string.match(rest, '^(%d+)'))}
end
return {0, redis.call('PTTL', KEYS[1]), fence}
