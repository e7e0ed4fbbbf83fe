-- touch.lua: write the record a script just read or wrote, changing
-- nothing, so that the WAIT after it counts the replicas that have it.
--
-- KEYS[1] the record (quota's request-id record, idempotency's record).
--
-- Returns 1 when it wrote, 0 when the record is absent or has no TTL
-- (then nothing is written and the WAIT after it vouches for nothing).
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
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then
	return 0
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
