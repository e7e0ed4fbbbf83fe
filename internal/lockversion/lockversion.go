// Package lockversion is the version of a lock: what the agent's API gives
// each lock and each finding on a lock without a TTL, and what a
// remediation request sends back as its precondition (If-Match), so that
// the lock deleted is the one the operator looked at. The detectors and
// the agent compute it here, once, so that a finding's version is the one
// the agent's DELETE compares with.
//
// A version is opaque to clients: they compare it for equality and send
// it back. It never carries a lock value or its owner token (a
// capability): on Redis it is the SHA-1 of the value, in lowercase hex,
// which is what redis.sha1hex computes in a script (SHA-1 is only an
// equality check here, on a value whose owner token has 128 random bits);
// on etcd it is the mod revision of the holder's entry, in decimal, which
// every write of the entry changes (another value, the same value again,
// a lease) and which etcd never gives twice.
package lockversion

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
)

// Redis returns the version of a Redis lock whose value is value.
func Redis(value string) string {
	sum := sha1.Sum([]byte(value))
	return hex.EncodeToString(sum[:])
}

// Etcd returns the version of an etcd lock whose holder entry has mod
// revision modRevision.
func Etcd(modRevision int64) string {
	return strconv.FormatInt(modRevision, 10)
}

// ValidRedis reports whether v has the form of a Redis lock's version: 40
// lowercase hex digits.
func ValidRedis(v string) bool {
	if len(v) != 2*sha1.Size {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidEtcd reports whether v has the form of an etcd lock's version: a
// revision (a positive int64) in decimal, without sign or leading zeros.
func ValidEtcd(v string) bool {
	n, err := strconv.ParseInt(v, 10, 64)
	return err == nil && n > 0 && strconv.FormatInt(n, 10) == v
}
