-- remediate.lua: delete an immortal lock, only if it is still the one the
-- operator was shown.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the lock's whole value as the agent read it just before
--
-- Returns 1 when deleted, 0 when the value changed (a new holder), 2 when
-- the value is the same but the key got a TTL meanwhile, -1 when the key is
-- gone: released by its holder meanwhile, or deleted by this same call's
-- first run (go-redis resends a command whose reply was lost, after it
-- ran), which the agent cannot tell apart and reports as such.
--
-- Why: between reading the lock and deleting it, its holder may have
-- released it and another process taken it; an exact compare of the value
-- (which holds the owner token) and of the missing TTL deletes only the
-- lock that was judged immortal. The agent checked the version a request
-- sends (If-Match, the SHA-1 of a value) against the value it read, so the
-- exact compare here also deletes the lock only at that version: no digest
-- is needed in the script. 0 and 2 are told apart because a request with a
-- version answers them differently (412: another version; 409: the same
-- version, but it expires by itself now).
local cur = redis.call('GET', KEYS[1])
if not cur then
  return -1
end
if cur ~= ARGV[1] then
  return 0
end
if redis.call('PTTL', KEYS[1]) ~= -1 then
  return 2
end
return redis.call('DEL', KEYS[1])
