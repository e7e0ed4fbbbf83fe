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
-- so a retried call whose reply was lost is idempotent), or {0, pttl} with
-- the holder's remaining TTL in milliseconds.
--
-- The lock value is "<token> <fence> <json>": the token first so that the
-- owner check is a prefix compare, the fence second so that the agent and
-- the idempotent path read it without a JSON parser.
local cur = redis.call('GET', KEYS[1])
if cur then
	if string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
		local rest = string.sub(cur, #ARGV[1] + 1)
		return {1, tonumber(string.match(rest, '^(%d+)'))}
	end
	return {0, redis.call('PTTL', KEYS[1])}
end

-- Fences must increase forever without a key that lives forever. The counter
-- expires after TTL + retention; the next fence is then seeded from the
-- server clock in microseconds, which has moved past every fence issued
-- before the counter expired (fences never run ahead of the clock by more
-- than one per acquisition within the same microsecond).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local fence = last + 1
if now > fence then
	fence = now
end
local f = string.format('%.0f', fence)
redis.call('SET', KEYS[2], f, 'PX', ARGV[4])
local at = string.format('%.0f', math.floor(now / 1000))
redis.call('SET', KEYS[1], ARGV[1] .. f .. ' ' .. ARGV[3] .. ',"fence":' .. f .. ',"acquired_at_ms":' .. at .. '}', 'PX', ARGV[2])
return {1, fence}
