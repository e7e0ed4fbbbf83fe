-- Renew a held slot: owner-checked PEXPIRE (never a bare EXPIRE) and a raised high-water
-- reservation.
-- KEYS[1] slot key, KEYS[2] high-water key, KEYS[3] ID-space key
-- ARGV[1] owner token, ARGV[2] TTL ms, ARGV[3] caller's clock, Unix ms, ARGV[4] high-water TTL ms,
-- ARGV[5] the registry's ID space (as claim.lua: written with the mark, under its TTL, so
-- that it lives as long as the mark; the claim checked it, and while the slot is held no
-- claim of another space writes it)
-- Returns {1, reserve, floor} when renewed, {0} when the slot is gone, {-1} when another
-- owner holds it. floor is the one the slot's value records (claim.lua): the first claim's,
-- which the holder already has, or that of a re-claim after the slot vanished whose reply
-- was lost (and its release with it), which the holder must wait for: on a mark the store
-- lost, the previous holder's lease runs until then.
local cur = redis.call('GET', KEYS[1])
if not cur then
  return {0}
end
local ok, v = pcall(cjson.decode, cur)
if not ok or type(v) ~= 'table' or v.owner ~= ARGV[1] then
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local floor = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local reserve = math.max(floor, tonumber(ARGV[3]) + tonumber(ARGV[2]))
redis.call('SET', KEYS[2], string.format('%d', reserve), 'PX', ARGV[4])
redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[4])
return {1, reserve, tonumber(v.floor) or 0}
