package workerid

import (
	"encoding/json"
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
