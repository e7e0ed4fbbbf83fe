// Package lockvalue is the one format of the holder metadata lockgov keeps
// in lock values: who holds a lock (service, instance, host, pid), why
// (trace id, business labels), since when, with which fence and TTL, and
// which lockgov wrote it. Backends write it with a Writer and frame it their
// own way (redislock puts the owner token and the fence in front of it;
// etcdlock keeps the fence in the key's create revision); the agent, `lockgov
// locks` and operators read it back through the backends' DecodeValue
// functions, which call Decode here.
//
// The package is standard-library only, so anything may import it: a
// backend, the agent, a third-party tool reading lockgov's keys.
//
// # The format
//
// A JSON object. Member names are stable (they are what an operator sees in
// redis-cli GET and etcdctl get); readers ignore members they do not know, so
// writers may add members without a format version bump:
//
//	{"service":"billing","instance":"pod-3","host":"node-7","pid":4242,"v":"v0.3.0",
//	 "trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","labels":{"order":"o-1"},
//	 "ttl_ms":30000,"queued_at_ms":1764590000000,"acquired_at_ms":1764590000012,"fence":1764590000012345}
//
// Owner tokens are capabilities: they are never part of a Holder, so a
// Holder may be logged, served by an API or put into a finding.
//
// # Failure modes
//
// Decode returns an error for bytes that are not a JSON object; backends'
// DecodeValue functions turn every value they cannot read (a bare token,
// redsync's or bsm/redislock's values, garbage) into a Holder with Foreign
// set, never an error: a lock written by another library is a fact to
// report, not a failure of the reader. Values are read from a store anyone
// with access may write, so Decode bounds what it keeps (MaxLabels labels,
// MaxString bytes per string) instead of trusting sizes it is given.
package lockvalue
