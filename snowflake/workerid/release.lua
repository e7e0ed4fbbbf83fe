-- Release a held slot: owner-checked DEL, and the high-water mark lowered from the
-- reservation to the millisecond the generator really used last (when known).
-- KEYS[1] slot key, KEYS[2] high-water key
-- ARGV[1] owner token, ARGV[2] last used, Unix ms (0: unknown, keep the reservation),
-- ARGV[3] high-water TTL ms
-- Returns 1 when released, 0 when the slot was not ours.
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
local ok, v = pcall(cjson.decode, cur)
if not ok or type(v) ~= 'table' or v.owner ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
