-- Fenced SET: write a value and its fence only when the fence is above the
-- fence stored with the value, in one step.
--
-- KEYS[1]  the value key
-- KEYS[2]  its fence key (same hash slot: the caller derives it from KEYS[1])
-- ARGV[1]  the value
-- ARGV[2]  the offered fence: decimal, no sign, no leading zeros, not "0"
-- ARGV[3]  TTL in milliseconds for both keys, "0" for none
--
-- Returns {1, offered} when written, {0, stored} when refused. An offered
-- fence equal to the stored one is refused (a lease writes a key once),
-- unless the stored value is this value: that is the same write sent again
-- (go-redis resends a command whose reply was lost, after it ran), and it
-- answers written without changing anything, so that the write it already
-- made is not reported refused.
--
-- Fences are compared as decimal strings (longer is larger, then byte
-- order), not as Lua numbers: Lua numbers are doubles, exact only to 2^53,
-- and a fence is any uint64.
local stored = redis.call('GET', KEYS[2])
local offered = ARGV[2]
if stored then
  if #offered < #stored or (#offered == #stored and offered < stored) then
    return {0, stored}
  end
  if offered == stored then
    if redis.call('GET', KEYS[1]) == ARGV[1] then
      return {1, offered}
    end
    return {0, stored}
  end
end
-- Value and fence under the same TTL: neither outlives the other, so a
-- value never loses the fence that guards it.
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  redis.call('SET', KEYS[2], offered, 'PX', ttl)
else
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], offered)
end
return {1, offered}
