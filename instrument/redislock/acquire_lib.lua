-- acquire_lib.lua: what acquire.lua, acquire_fair.lua and handoff_lib.lua
-- share. Redis runs each script on its own, so scripts.go puts this text
-- where a script's "#include" line names it; it is never run alone.
--
-- KEYS, ARGV: none of its own; its functions take what they need as
-- arguments.
-- Returns: nothing; it defines next_fence, owned_fence and lock_value.

-- next_fence returns the next fence for counter, as a number and as the
-- decimal string the lock value carries: max(counter + 1, server time in
-- microseconds), with the counter moved up to it, on every attempt.
--
-- The counter alone is not enough: a promoted replica that lagged, a
-- restart from an older RDB snapshot or a crash under appendfsync everysec
-- leaves a counter that is present but stale, and counting on from it
-- repeats fences already issued. The clock is what survives those losses:
-- every fence issued before them is at most the clock of the server that
-- issued it (the counter only trails the clock: one per acquisition against
-- a million a second), so as long as server clocks do not step back, and the
-- promoted replica's clock is not behind the lost primary's by more than the
-- failover took, the clock alone is above them. The counter covers what the
-- clock cannot: two attempts in one microsecond, or a clock that stepped
-- back by less than the counter's lifetime.
--
-- One SET ... GET writes the clock and reads the old counter; only when the
-- counter is ahead of the clock (rare: see above) is it written again. The
-- counter is under a TTL (counter_ttl: TTL + retention, re-armed on every
-- attempt), so a lock key leaves no permanent key behind. Lua numbers are
-- doubles: microseconds (~1.8e15) are exact below 2^53, and %.0f prints
-- them without an exponent. t is the reply of TIME: seconds and
-- microseconds as decimal strings, the latter without leading zeros; the
-- common case builds the fence's string from them by concatenation, which
-- costs the server less than string.format (measured: docs/BENCHMARKS.md).
local function next_fence(t, counter, counter_ttl)
	local f = t[1] .. string.sub('00000' .. t[2], -6)
	local fence = tonumber(f)
	local prev = tonumber(redis.call('SET', counter, f, 'PX', counter_ttl, 'GET'))
	if prev and prev >= fence then
		fence = prev + 1
		f = string.format('%.0f', fence)
		redis.call('SET', counter, f, 'PX', counter_ttl)
	end
	return fence, f
end

-- owned_fence returns true and the fence when cur, the lock's value, is
-- token's: an earlier try of the same Acquire ran here but its reply was
-- lost (a go-redis retry, or an earlier quorum attempt whose node timed
-- out). It then re-arms the lock's TTL: quorum mode counts the lease valid
-- for a TTL from this attempt's start, so the key must live a TTL from now,
-- not from the earlier try.
local function owned_fence(lock, cur, token, ttl)
	if cur and string.sub(cur, 1, #token) == token then
		redis.call('PEXPIRE', lock, ttl)
		local rest = string.sub(cur, #token + 1)
		return true, tonumber(string.match(rest, '^(%d+)'))
	end
	return false
end

-- lock_value is "<token> <fence> <json>": the token first so that the owner
-- check is a prefix compare, the fence second so that the agent and the
-- idempotent path read it without a JSON parser. meta is the JSON object
-- without its closing brace; the fence goes in as its last field.
local function lock_value(token, f, meta)
	return token .. f .. ' ' .. meta .. ',"fence":' .. f .. '}'
end

