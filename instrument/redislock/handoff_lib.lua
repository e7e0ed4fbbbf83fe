-- handoff_lib.lua: what release.lua and leave.lua share. scripts.go puts it,
-- after acquire_lib.lua (next_fence, lock_value), where their "#include"
-- line says; it is never run alone.
--
-- hand_over gives a lock its owner is giving up straight to the first live
-- waiter in queue, so that a release is a handoff in one round trip: the
-- waiter is told it holds the lock, and nobody else (the releasing
-- goroutine asking again included) can take it in between.
--
-- A queue entry is "<token> <ttl ms> <locker id> <metadata>" (the
-- metadata: the JSON object of the lock value without its closing brace;
-- the locker id: the waiting Locker's channel suffix), the same string as
-- the entry's member in waiters, whose score is the server time in ms after
-- which the waiter counts as gone (it stopped retrying: it gave up without
-- leaving, or its process died). hand_over pops entries until it finds one
-- whose deadline has not passed and gives it the lock: the lock value the
-- waiter's own acquire would have written, with a fresh fence, under the
-- waiter's TTL. It then publishes "<waiter id> <fence>" on channel ..
-- ':' .. locker id, a channel only the waiter's Locker subscribes to (one
-- process wakes, not every process waiting on the key), the waiter id
-- being the first 24 hex digits of the SHA-1 of the token (never the
-- token: a token is the capability to release the lock). With no live
-- waiter, the lock is deleted and nothing is published.
--
-- The waiter's lease counts from before its last attempt was sent (the
-- handoff happened after that attempt ran), never from the handoff itself,
-- and a waiter that gave up finds the lock in its leave.lua and hands it on.
--
-- first, if given, is the head entry the caller popped already.
local function hand_over(lock, counter, queue, waiters, channel, retention, first)
	local t, now
	local e = first or redis.call('LPOP', queue)
	while e do
		if not t then
			t = redis.call('TIME')
			now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
		end
		local dl = tonumber(redis.call('ZSCORE', waiters, e))
		redis.call('ZREM', waiters, e)
		local tok, ttl, lid, meta = string.match(e, '^([^ ]+ )(%d+) ([^ ]+) (.*)$')
		if tok and dl and dl >= now then
			local _, f = next_fence(t, counter, tonumber(ttl) + retention)
			redis.call('SET', lock, lock_value(tok, f, meta), 'PX', ttl)
			redis.call('PUBLISH', channel .. ':' .. lid, string.sub(redis.sha1hex(tok), 1, 24) .. ' ' .. f)
			return true
		end
		e = redis.call('LPOP', queue)
	end
	redis.call('DEL', lock)
	return false
end
