package workerid

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Claim is the metadata stored with a held slot, readable by operators and the agent.
type Claim struct {
	Service   string    `json:"service"`
	WorkerID  int64     `json:"worker_id"`
	PodIP     string    `json:"pod_ip,omitempty"`
	Hostname  string    `json:"hostname"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"` // when this process started
	ClaimedAt time.Time `json:"claimed_at"`
}

// stored is the value of a slot key: the claim plus the owner token. The token is a
// capability (whoever has it can renew and release); it is never logged or exported.
type stored struct {
	Owner string `json:"owner"`
	Claim
}

func decodeStored(b []byte) (stored, bool) {
	var s stored
	if err := json.Unmarshal(b, &s); err != nil {
		return stored{}, false
	}
	return s, true
}

// SlotKey is the key of WorkerID slot id under prefix (DefaultKeyPrefix
// unless the registry was given WithKeyPrefix); its high-water mark is
// SlotKey + ":hw", the ID space its mark is in SlotKey + ":space" (see the
// package doc, ID space). The same names serve Redis and etcd; on Redis the
// three share the hash tag {id}, so one script reaches them on a Cluster.
func SlotKey(prefix string, id int64) string {
	return prefix + "{" + strconv.FormatInt(id, 10) + "}"
}

// Suffixes of a slot's companion keys, appended to SlotKey.
const (
	highWaterSuffix = ":hw"
	spaceSuffix     = ":space"
)

// ParseSlotKey returns the slot id of a slot key under prefix; ok is false
// for any other key, high-water and space keys included.
func ParseSlotKey(prefix, key string) (id int64, ok bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, "}")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || id < 0 {
		return 0, false
	}
	return id, true
}

// DecodeClaim reads the claim from a slot key's value, without the owner
// token. ok is false for a value workerid did not write.
func DecodeClaim(b []byte) (c Claim, ok bool) {
	s, ok := decodeStored(b)
	if !ok || s.Owner == "" {
		return Claim{}, false
	}
	return s.Claim, true
}
