-- publish.lua: the leading agent writes its last scan for the followers.
--
-- KEYS[1]  the record key (lockgov:agent:record)
-- ARGV[1]  the writer's fence (its leader lock's fence), decimal
-- ARGV[2]  the record: "<fence> <json>"
-- ARGV[3]  the record's TTL in milliseconds
--
-- Returns 1 when written, 0 when refused.
--
-- Why: a leader that was paused past its lease may still run its scan; its
-- write must not replace the record of the leader that took over, whose
-- fence is larger. Fences are compared as decimal strings (length, then
-- bytes) because Lua numbers lose precision above 2^53.
local cur = redis.call('GET', KEYS[1])
if cur then
  local f = string.match(cur, '^(%d+) ')
  local mine = ARGV[1]
  if f and (#f > #mine or (#f == #mine and f > mine)) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
