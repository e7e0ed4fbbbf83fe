-- deduct.lua: check the remaining quota and deduct in one atomic step.
-- KEYS[1] quota hash with field "remain"; ARGV[1] amount (> 0).
-- Returns the remainder after the deduction, or -1 when it is not enough
-- (or the merchant has no quota), touching nothing.
local need = tonumber(ARGV[1])
if need == nil or need <= 0 then
	return redis.error_reply('amount must be a positive integer')
end
local remain = tonumber(redis.call('HGET', KEYS[1], 'remain'))
if remain == nil or remain < need then
	return -1
end
return redis.call('HINCRBY', KEYS[1], 'remain', -need)
