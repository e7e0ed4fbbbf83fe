-- Release a held slot: owner-checked DEL, and the high-water mark lowered from the
-- reservation to the millisecond the generator really used last (when known).
-- KEYS[1] slot key, KEYS[2] high-water key, KEYS[3] ID-space key
-- ARGV[1] owner token, ARGV[2] last used, Unix ms (0: unknown, keep the reservation; -1:
-- the claim failed, so nothing was issued under it: the mark goes back to the floor the
-- claim found, recorded in the slot's value, so that failed claims retried one after
-- another do not each push it a TTL further), ARGV[3] high-water TTL ms, ARGV[4] the
-- registry's ID space
-- Returns 1 when released, 0 when the slot was not ours.
-- The space key is never deleted: it says which space the mark's IDs are in, and the mark
-- outlives the slot. Written with the mark, it keeps the mark's TTL.
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
local ok, v = pcall(cjson.decode, cur)
if not ok or type(v) ~= 'table' or v.owner ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
-- Never below the floor the slot's claim found: a mark the store lost is waited out
-- there (claim.lua), and a re-claim whose reply was lost may have raised it above what the
-- holder knew.
local last = tonumber(ARGV[2])
if last == -1 then
  last = tonumber(v.floor) or 0
elseif last > 0 then
  last = math.max(last, tonumber(v.floor) or 0)
end
if last > 0 then
  redis.call('SET', KEYS[2], string.format('%d', last), 'PX', ARGV[3])
  redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[3])
end
return 1
