-- acquire.lua: take the lock if it is free, in one round trip. Uses
-- acquire_lib.lua (next_fence, owned_fence, lock_value), which scripts.go
-- puts where the "#include" line is.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key (same hash slot as KEYS[1])
-- KEYS[3]  waiting only: the waiter queue
-- KEYS[4]  waiting only: the waiter deadlines
-- ARGV[1]  owner token followed by one space (the prefix every owner check compares)
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  metadata: a JSON object without its closing brace
-- ARGV[4]  fence counter TTL in milliseconds (TTL + retention)
-- ARGV[5]  waiting only: this waiter's queue entry, "<token> <ttl> <locker id> <metadata>"
-- ARGV[6]  waiting only: waiter timeout in milliseconds
--
-- Returns the fence, a bare integer, when acquired (also when this token
-- already holds it, so a retried call whose reply was lost is idempotent,
-- and a waiter a release handed the lock to finds it here if it missed the
-- notification; the TTL is then re-armed), or {0, pttl, fence} with the
-- holder's remaining TTL in milliseconds and the fence this attempt
-- consumed (quorum mode takes the largest over all nodes; a waiter ignores
-- a handoff notification whose fence is not above it: it is older than this
-- attempt). A fence is at least 1 (server microseconds), so the two never
-- read alike; the common reply is the bare integer because a table costs
-- redis-server about 4.5k instructions more per acquire (building it, its
-- conversion to a reply, its garbage; measured: docs/RELIABILITY.md, h92).
--
-- A waiter (ARGV[5] given) that does not get the lock joins the queue
-- release.lua hands the lock over from, or refreshes its deadline there;
-- one that gets it leaves the queue. Callers that do not wait never queue,
-- and take a free lock whoever queues: this mode is not fair (see
-- acquire_fair.lua), it only makes a release a handoff.
--
-- Needs Redis 6.2 or later (SET ... GET).

-- #include acquire_lib.lua

-- Every attempt moves the counter, a failed one too: fences need only
-- increase, not be dense, and quorum mode takes the largest fence over all
-- nodes an attempt reached.
local t = redis.call('TIME')
local fence, f = next_fence(t, KEYS[2], ARGV[4])
local entry = ARGV[5]
if redis.call('SET', KEYS[1], lock_value(ARGV[1], f, ARGV[3]), 'NX', 'PX', ARGV[2]) then
	if entry and redis.call('ZREM', KEYS[4], entry) == 1 then
		redis.call('LREM', KEYS[3], 0, entry)
	end
	return fence
end

local mine, earlier = owned_fence(KEYS[1], redis.call('GET', KEYS[1]), ARGV[1], ARGV[2])
if mine then
	return earlier or 0
end
if entry then
	local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	local wt = tonumber(ARGV[6])
	if redis.call('ZADD', KEYS[4], now + wt, entry) == 1 then
		redis.call('RPUSH', KEYS[3], entry)
	end
	local queueTTL = wt * 2 + tonumber(ARGV[2])
	redis.call('PEXPIRE', KEYS[3], queueTTL)
	redis.call('PEXPIRE', KEYS[4], queueTTL)
end
return {0, redis.call('PTTL', KEYS[1]), fence}
