-- leave.lua: a waiter that gives up leaves the queue, so that no release
-- hands it the lock. If a release handed it the lock already (the waiter
-- gave up before it heard), it hands the lock on in turn; in fair mode, a
-- lock that is free while others queue goes to the next of them.
-- acquire_lib.lua and handoff_lib.lua go where the "#include" line is.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue
-- KEYS[3]  waiter deadlines
-- KEYS[4]  fence counter key
-- ARGV[1]  waiter token followed by one space
-- ARGV[2]  release notification channel
-- ARGV[3]  this waiter's queue entry
-- ARGV[4]  fence retention in milliseconds
-- ARGV[5]  '1' in fair mode
-- #include acquire_lib.lua handoff_lib.lua
redis.call('LREM', KEYS[2], 0, ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[3])
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, #ARGV[1]) == ARGV[1] then
	hand_over(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[4]))
elseif not cur and ARGV[5] == '1' then
	hand_over(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[4]))
end
return 1
