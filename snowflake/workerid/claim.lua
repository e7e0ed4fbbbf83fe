-- Claim a WorkerID slot: set-if-absent (or already ours) with a TTL, in one step with
-- reading and raising the slot's high-water mark.
-- KEYS[1] slot key, KEYS[2] high-water key
-- ARGV[1] value (JSON with "owner"), ARGV[2] owner token, ARGV[3] TTL ms,
-- ARGV[4] caller's clock, Unix ms, ARGV[5] high-water TTL ms
-- Returns {1, floor, reserve} when claimed, {0, holder value} when another owner holds it.
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, v = pcall(cjson.decode, cur)
  if not ok or type(v) ~= 'table' or v.owner ~= ARGV[2] then
    return {0, cur}
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
local floor = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local reserve = math.max(floor, tonumber(ARGV[4])) + tonumber(ARGV[3])
redis.call('SET', KEYS[2], string.format('%d', reserve), 'PX', ARGV[5])
return {1, floor, reserve}
