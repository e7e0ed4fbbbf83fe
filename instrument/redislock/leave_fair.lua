-- leave_fair.lua: a waiter that gives up leaves the queue, so the next one
-- need not wait for its deadline to pass; if it was at the head, the new
-- head is told in case the lock is already free.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue
-- KEYS[3]  waiter deadlines
-- ARGV[1]  waiter token followed by one space
-- ARGV[2]  release notification channel
local head = redis.call('LINDEX', KEYS[2], 0)
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if head == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
	redis.call('PUBLISH', ARGV[2], redis.call('LINDEX', KEYS[2], 0) or '')
end
return 1
