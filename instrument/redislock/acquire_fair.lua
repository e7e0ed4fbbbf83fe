-- acquire_fair.lua: take the lock only if it is free and this caller is at
-- the head of the queue (or the queue is empty); otherwise queue up, FIFO.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key
-- KEYS[3]  queue: a list of waiter tokens, oldest first
-- KEYS[4]  waiter deadlines: a sorted set, token -> server ms after which
--          the waiter counts as gone (it stopped waiting or died)
-- ARGV[1]  owner token followed by one space
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  metadata: a JSON object without its closing brace
-- ARGV[4]  fence counter TTL in milliseconds
-- ARGV[5]  waiter timeout in milliseconds: a waiter that has not retried
--          for this long is skipped
-- ARGV[6]  '1' for a single attempt (FailFast): never join the queue
--
-- Returns {1, fence} when acquired, or {0, pttl, position} where position is
-- this caller's 0-based place in the queue (0: next in line).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Skip waiters at the head that stopped retrying.
while true do
	local head = redis.call('LINDEX', KEYS[3], 0)
	if not head then
		break
	end
	local dl = redis.call('ZSCORE', KEYS[4], head)
	if dl and tonumber(dl) >= now then
		break
	end
	redis.call('LPOP', KEYS[3])
	redis.call('ZREM', KEYS[4], head)
end

-- This token already holds it (a retried call whose reply was lost): re-arm
-- the TTL, as acquire.lua does, so the key lives a TTL from this attempt.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	local rest = string.sub(cur, #ARGV[1] + 1)
	return {1, tonumber(string.match(rest, '^(%d+)'))}
end

local queueTTL = tonumber(ARGV[5]) * 2 + tonumber(ARGV[2])
if not cur then
	local head = redis.call('LINDEX', KEYS[3], 0)
	if not head or head == ARGV[1] then
		if head then
			redis.call('LPOP', KEYS[3])
			redis.call('ZREM', KEYS[4], head)
		end
		-- The fence as in acquire.lua: max(counter + 1, server time in
		-- microseconds), the counter moved up to it, so that a stale counter
		-- (failover to a lagging replica, restart from an old snapshot) never
		-- repeats a fence.
		local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
		local f = string.format('%.0f', fence)
		local prev = tonumber(redis.call('SET', KEYS[2], f, 'PX', ARGV[4], 'GET'))
		if prev and prev >= fence then
			fence = prev + 1
			f = string.format('%.0f', fence)
			redis.call('SET', KEYS[2], f, 'PX', ARGV[4])
		end
		redis.call('SET', KEYS[1], ARGV[1] .. f .. ' ' .. ARGV[3] .. ',"fence":' .. f .. '}', 'PX', ARGV[2])
		if redis.call('EXISTS', KEYS[3]) == 1 then
			redis.call('PEXPIRE', KEYS[3], queueTTL)
			redis.call('PEXPIRE', KEYS[4], queueTTL)
		end
		return {1, fence}
	end
end

if ARGV[6] == '1' then
	return {0, redis.call('PTTL', KEYS[1]), -1}
end

-- Queue up, or refresh this waiter's deadline.
if not redis.call('ZSCORE', KEYS[4], ARGV[1]) then
	redis.call('RPUSH', KEYS[3], ARGV[1])
end
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[5]), ARGV[1])
redis.call('PEXPIRE', KEYS[3], queueTTL)
redis.call('PEXPIRE', KEYS[4], queueTTL)
local pos = redis.call('LPOS', KEYS[3], ARGV[1])
return {0, redis.call('PTTL', KEYS[1]), pos or 0}
