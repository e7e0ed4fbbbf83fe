-- acquire_fair.lua: take the lock only if it is free and this caller is at
-- the head of the queue (or the queue is empty); otherwise queue up, FIFO.
-- Uses acquire_lib.lua (next_fence, owned_fence, lock_value), which
-- scripts.go puts where the "#include" line is.
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
-- ARGV[7]  this waiter's queue entry, "<token> <ttl> <locker id> <metadata>" (see
--          handoff_lib.lua: a release hands the lock to the head entry)
--
-- Returns the fence, a bare integer, when acquired (as acquire.lua does),
-- or {0, pttl, position, floor} where
-- position is this caller's 0-based place in the queue (0: next in line)
-- and floor is at least every fence issued before this attempt, and below
-- every fence issued after it: a waiter ignores a handoff notification
-- whose fence is not above it (the notification is older than this
-- attempt).
-- #include acquire_lib.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Skip waiters at the head that stopped retrying. head is then the first
-- live waiter, or false: the queue is empty (nothing below changes it
-- before it is read again).
local head
while true do
	head = redis.call('LINDEX', KEYS[3], 0)
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
local mine, earlier = owned_fence(KEYS[1], cur, ARGV[1], ARGV[2])
if mine then
	return earlier or 0
end

local queueTTL = tonumber(ARGV[5]) * 2 + tonumber(ARGV[2])
if not cur then
	if not head or head == ARGV[7] then
		if head then
			redis.call('LPOP', KEYS[3])
			redis.call('ZREM', KEYS[4], head)
		end
		local fence, f = next_fence(t, KEYS[2], ARGV[4])
		redis.call('SET', KEYS[1], lock_value(ARGV[1], f, ARGV[3]), 'PX', ARGV[2])
		if head and redis.call('EXISTS', KEYS[3]) == 1 then
			redis.call('PEXPIRE', KEYS[3], queueTTL)
			redis.call('PEXPIRE', KEYS[4], queueTTL)
		end
		return fence
	end
end

if ARGV[6] == '1' then
	return {0, redis.call('PTTL', KEYS[1]), -1}
end

-- Queue up, or refresh this waiter's deadline.
if redis.call('ZADD', KEYS[4], now + tonumber(ARGV[5]), ARGV[7]) == 1 then
	redis.call('RPUSH', KEYS[3], ARGV[7])
end
redis.call('PEXPIRE', KEYS[3], queueTTL)
redis.call('PEXPIRE', KEYS[4], queueTTL)
local pos = redis.call('LPOS', KEYS[3], ARGV[7])

-- The floor is max(counter, server µs - 1), read without writing: a failed
-- attempt here neither moves nor re-arms the counter, so the counter alone
-- is gone once a holder outlives TTL + retention, and reporting it (0)
-- would let a notification of any earlier handoff through. A fence issued
-- in an earlier microsecond is at most that microsecond (next_fence), one
-- issued in this one is in the counter; every later fence is
-- max(counter + 1, a later or equal clock), above both.
local clock = tonumber(t[1] .. string.sub('00000' .. t[2], -6)) - 1
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
return {0, redis.call('PTTL', KEYS[1]), pos or 0, math.max(counter, clock)}
