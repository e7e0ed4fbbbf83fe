-- release_fair.lua: delete the lock only if this token owns it, and tell
-- the waiter at the head of the queue that it is its turn.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue
-- ARGV[1]  owner token followed by one space
-- ARGV[2]  release notification channel
--
-- The message is the head waiter's token ('' when nobody waits), so only
-- that waiter wakes; the others keep their place.
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	redis.call('PUBLISH', ARGV[2], redis.call('LINDEX', KEYS[2], 0) or '')
	return 1
end
return 0
