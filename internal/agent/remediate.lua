-- remediate.lua: delete an immortal lock, only if it is still the one the
-- operator was shown.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the lock's whole value as the agent read it just before
--
-- Returns 1 when deleted, 0 when the key changed (another value: a new
-- holder) or got a TTL meanwhile, -1 when the key is gone: released by its
-- holder meanwhile, or deleted by this same call's first run (go-redis
-- resends a command whose reply was lost, after it ran), which the agent
-- cannot tell apart and reports as such.
--
-- Why: between reading the lock and deleting it, its holder may have
-- released it and another process taken it; an exact compare of the value
-- (which holds the owner token) and of the missing TTL deletes only the
-- lock that was judged immortal.
local cur = redis.call('GET', KEYS[1])
if not cur then
  return -1
end
if cur == ARGV[1] and redis.call('PTTL', KEYS[1]) == -1 then
  return redis.call('DEL', KEYS[1])
end
return 0
