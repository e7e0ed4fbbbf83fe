-- acquire.lua: take the lock if it is free, in one round trip. Runs after
-- acquire_lib.lua (next_fence, owned_fence, lock_value).
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
-- Needs Redis 6.2 or later (SET ... GET).

-- Every attempt moves the counter, a failed one too: fences need only
-- increase, not be dense, and quorum mode takes the largest fence over all
-- nodes an attempt reached.
local fence, f = next_fence(redis.call('TIME'), KEYS[2], ARGV[4])
if redis.call('SET', KEYS[1], lock_value(ARGV[1], f, ARGV[3]), 'NX', 'PX', ARGV[2]) then
	return {1, fence}
end

local mine, earlier = owned_fence(KEYS[1], redis.call('GET', KEYS[1]), ARGV[1], ARGV[2])
if mine then
	return {1, earlier}
end
return {0, redis.call('PTTL', KEYS[1]), fence}
