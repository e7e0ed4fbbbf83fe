-- claim.lua: take a WorkerID slot if it is free or already ours, and read and raise its
-- high-water mark, in one step.
--
-- KEYS[1]  slot key
-- KEYS[2]  high-water key (same hash tag)
-- KEYS[3]  ID-space key (same hash tag)
-- ARGV[1]  the claim: a JSON object with "owner", without its closing brace
-- ARGV[2]  owner token
-- ARGV[3]  lease TTL in milliseconds
-- ARGV[4]  the caller's wall clock, Unix ms
-- ARGV[5]  high-water key TTL in milliseconds
-- ARGV[6]  the longest lease TTL of any registry on this prefix, in milliseconds (at
--          least ARGV[3]; not a number: ARGV[3])
-- ARGV[7]  the registry's ID space, "<layout>@<epoch Unix ms>"
--
-- Returns {1, floor, reserve} when claimed, also when this token already holds the slot,
-- {0, holder value} when another owner holds it, or {2, space} when the slot records
-- another ID space (nothing is written then). floor (Unix ms) is the mark the generator
-- issues above; reserve is the mark now persisted, which it never issues past.
--
-- The mark is a Unix ms, an ID's time counts from its generator's epoch: under another
-- layout or epoch the same mark covers other IDs. So the space the mark's IDs are in is
-- kept beside it, written with it and under the same TTL (so it lives as long as the
-- mark), and a claim of another space is refused, held slot or free. A missing space key
-- is accepted and written: a slot used only by registries older than the space key (a
-- rolling upgrade), never used, or idle past the high-water TTL.
--
-- The slot value is the claim plus "floor", the floor this claim found. A second run of
-- the same claim (go-redis retries EVALSHA after a read timeout; the first reply was
-- lost) finds the slot already ours and answers that recorded floor. Reading the
-- high-water key instead would give back the first run's own reservation, a TTL ahead,
-- and the generator would refuse to issue for a whole TTL.
local space = redis.call('GET', KEYS[3])
if space and space ~= ARGV[7] then
  return {2, space}
end
local ttl = tonumber(ARGV[3])
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, v = pcall(cjson.decode, cur)
  if not ok or type(v) ~= 'table' or v.owner ~= ARGV[2] then
    return {0, cur}
  end
  local floor = tonumber(v.floor)
  if floor then
    -- Ours already: renew as renew.lua does, and answer what the first run answered.
    redis.call('PEXPIRE', KEYS[1], ttl)
    local hw = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
    local reserve = math.max(hw, tonumber(ARGV[4]) + ttl)
    redis.call('SET', KEYS[2], string.format('%d', reserve), 'PX', ARGV[5])
    redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[5])
    return {1, floor, reserve}
  end
  -- Ours without a recorded floor cannot happen (every Claim makes a new token and this
  -- script writes every value it owns); should it, claim the slot afresh below.
end

-- A missing high-water mark means unknown, not zero. Redis loses it together with the
-- slot on a restart without persistence (and on a failover to a replica that lagged,
-- eviction, FLUSHALL), while the previous holder may go on issuing IDs on a lease that is
-- valid on its side for up to one TTL after its last renewal: it stops at its next
-- renewal, which finds the slot taken, or when that lease runs out. Every such lease has
-- ended by the server's now + TTL, so that is the floor: the new holder waits one lease.
-- The previous holder's TTL is unknown too, so the TTL here is the longest any registry on
-- the prefix uses (ARGV[6]). A slot never used, or idle for longer than the high-water
-- TTL, waits too: Redis cannot tell it from a lost one.
local floor = tonumber(redis.call('GET', KEYS[2]) or '')
if not floor then
  local t = redis.call('TIME')
  floor = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + math.max(ttl, tonumber(ARGV[6]) or ttl)
end
local reserve = math.max(floor, tonumber(ARGV[4])) + ttl
redis.call('SET', KEYS[1], ARGV[1] .. string.format(',"floor":%d}', floor), 'PX', ttl)
redis.call('SET', KEYS[2], string.format('%d', reserve), 'PX', ARGV[5])
redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[5])
return {1, floor, reserve}
