package agent

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/lockgov/lockgov/detectors"
)

// finding is a detector's finding as a record keeps it.
type finding struct {
	detectors.Finding
	// Stale is set when the detector that made the finding did not
	// complete this scan (a store that timed out or failed), or completed
	// only part of it and could not check this finding
	// (detectors.PartialError): the finding is from its last run that did,
	// which ended at DetectedAt. It is kept
	// rather than dropped, as the detectors' contract says ("the findings
	// of the last successful call still stand"): a finding series that
	// vanished for one scan would start its alert's `for:` over.
	Stale      bool
	DetectedAt time.Time
}

// MarshalJSON writes the finding as detectors.Finding does, with
// "stale": true and "detected_at" when it is stale.
func (f finding) MarshalJSON() ([]byte, error) {
	b, err := f.Finding.MarshalJSON()
	if err != nil || !f.Stale {
		return b, err
	}
	at, err := json.Marshal(f.DetectedAt)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSuffix(b, []byte("}"))
	b = append(b, `,"stale":true,"detected_at":`...)
	b = append(b, at...)
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes (a follower reading the
// leader's record).
func (f *finding) UnmarshalJSON(b []byte) error {
	if err := f.Finding.UnmarshalJSON(b); err != nil {
		return err
	}
	var s struct {
		Stale      bool      `json:"stale"`
		DetectedAt time.Time `json:"detected_at"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	f.Stale, f.DetectedAt = s.Stale, s.DetectedAt
	return nil
}

// detectorStatus is how one detector fared in a scan, as the record (and
// /api/v1/findings "detectors") says it.
type detectorStatus struct {
	Detector string `json:"detector"`
	// Store is the store the detector reads, for the detectors of one
	// store (locks, store); empty for those that read the heartbeats of
	// every store (clock, deadlock, workerid).
	Store string `json:"store,omitempty"`
	// LastSuccess is the end of its last completed run in the leader's
	// term, or in the record the leader served before it took the lead
	// (seedRuns); zero, and absent in JSON, when none: its findings are
	// from then.
	LastSuccess time.Time `json:"last_success,omitzero"`
	// Error is why it did not complete this scan; its findings are then
	// those of LastSuccess, stale, or, for a partial run
	// (detectors.PartialError), this scan's and the stale ones of
	// LastSuccess that it could not check.
	Error string `json:"error,omitempty"`
}

// detectorRun is what the leader keeps of one detector between the scans
// of a term: the findings of its last completed run and when it ended.
type detectorRun struct {
	findings []detectors.Finding
	at       time.Time
}

// detectorStore is the store a detector reads, "" for a detector that
// reads several (or says nothing about it).
func detectorStore(d detectors.Detector) string {
	if s, ok := d.(interface{ Store() string }); ok {
		return s.Store()
	}
	return ""
}

// seedRuns starts a term's detector runs from the last record this agent
// served (the previous leader's, read as a follower, or its own): a
// detector that fails in the new leader's first scans keeps the findings it
// had, stale, with the time they were made, instead of dropping them at
// every change of leader. A detector whose name and store another one
// shares (only possible with WithDetectors) starts empty.
func (a *Agent) seedRuns() []detectorRun {
	runs := make([]detectorRun, len(a.dets))
	a.mu.RLock()
	rec := a.rec
	a.mu.RUnlock()
	keys := map[detectorStatus]int{}
	for _, d := range a.dets {
		keys[detectorStatus{Detector: d.Name(), Store: detectorStore(d)}]++
	}
	last := map[detectorStatus]time.Time{}
	for _, st := range rec.Detectors {
		if !st.LastSuccess.IsZero() {
			last[detectorStatus{Detector: st.Detector, Store: st.Store}] = st.LastSuccess
		}
	}
	for i, d := range a.dets {
		k := detectorStatus{Detector: d.Name(), Store: detectorStore(d)}
		at, ok := last[k]
		if !ok || keys[k] > 1 {
			continue
		}
		runs[i].at = at
		for _, f := range rec.Findings {
			if f.Detector == k.Detector && (k.Store == "" || f.Store == k.Store) {
				runs[i].findings = append(runs[i].findings, f.Finding)
			}
		}
	}
	return runs
}

// findingID is what tells a finding from another of its detector: a
// partial run that made a finding again keeps no stale copy of it.
type findingID struct {
	kind, store, key, pattern, instance string
}

func idOf(f detectors.Finding) findingID {
	id := findingID{kind: f.Kind, store: f.Store, key: f.Key, pattern: f.KeyPattern}
	if f.Holder != nil {
		id.instance = f.Holder.Instance
	}
	return id
}
