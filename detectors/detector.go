package detectors

import (
	"context"
	"encoding/json"
	"time"

	"github.com/lockgov/lockgov/instrument/lockvalue"
)

// Detector finds one family of problems in the stores.
type Detector interface {
	Name() string
	Detect(ctx context.Context) ([]Finding, error)
}

// Holder is a decoded lock value or heartbeat; it never carries the owner token.
type Holder = lockvalue.Holder

// Finding is one problem a Detector found.
type Finding struct {
	Detector   string        `json:"detector"` // "locks" | "clock" | "workerid" | "deadlock"
	Kind       string        `json:"kind"`
	Severity   string        `json:"severity"` // "info" | "warning" | "critical"
	Store      string        `json:"store"`    // redacted store address (no password)
	Key        string        `json:"key,omitempty"`
	KeyPattern string        `json:"key_pattern,omitempty"`
	Holder     *Holder       `json:"holder,omitempty"`
	Age        time.Duration `json:"-"`
	TTL        time.Duration `json:"-"`
	Detail     string        `json:"detail,omitempty"`
	Action     string        `json:"action,omitempty"`
}

type findingJSON struct {
	findingAlias
	AgeSeconds float64 `json:"age_seconds"`
	TTLSeconds float64 `json:"ttl_seconds"`
}

type findingAlias Finding

// MarshalJSON writes Age and TTL as age_seconds and ttl_seconds.
func (f Finding) MarshalJSON() ([]byte, error) {
	return json.Marshal(findingJSON{findingAlias(f), f.Age.Seconds(), f.TTL.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *Finding) UnmarshalJSON(data []byte) error {
	var j findingJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*f = Finding(j.findingAlias)
	f.Age = time.Duration(j.AgeSeconds * float64(time.Second))
	f.TTL = time.Duration(j.TTLSeconds * float64(time.Second))
	return nil
}
