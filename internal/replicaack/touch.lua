-- touch.lua: write the record a script just read or wrote, changing
-- nothing, so that the WAIT after it counts the replicas that have it.
--
-- KEYS[1] the record (quota's request-id record, idempotency's record,
--         redisfence's fence key).
--
-- Returns 1 when it wrote, 0 when the record is absent or expires within
-- the millisecond (then nothing is written and the WAIT after it vouches
-- for nothing).
--
-- Why: WAIT is documented to count the replicas that have the writes of
-- its own connection. A script that only read the record (a retry that
-- replays it, a resend of a script whose first run's reply was lost) wrote
-- nothing on its connection, which may be another than the one that wrote
-- the record; a server that counts only the connection's writes would
-- answer such a WAIT with replicas that never got the record. (redis
-- 7.0.15, measured: a WAIT after reads waits for the primary's whole
-- offset, so there the touch only costs a write; it keeps the documented
-- contract on servers that count less.) This write follows the record in
-- the one replication stream, so a replica that acknowledges it has the
-- record. PEXPIRE to the time left keeps the record's expiry where it was
-- (Redis 7 replicates it as PEXPIREAT at that instant).
--
-- A record without a TTL (redisfence's value written with TTL 0) has no
-- expiry to set again, and PERSIST on it writes nothing: it is given one
-- and PERSIST takes it away, two writes replicated together (a script's
-- writes reach the replica as one MULTI/EXEC) that leave it as it was.
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
	return 0
end
if ttl == -1 then
	redis.call('PEXPIRE', KEYS[1], 86400000)
	redis.call('PERSIST', KEYS[1])
	return 1
end
if ttl == 0 then
	-- Expiring now (PTTL rounds down): PEXPIRE 0 would delete it.
	return 0
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
