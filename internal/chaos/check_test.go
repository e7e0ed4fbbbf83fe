package chaos

import (
	"os"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// These tests check the checker on hand-written histories: a checker that
// passes everything would make every fault scenario pass.

func w(client int, call, ret int64, f uint64, out Outcome, stored uint64) Op {
	return Op{Client: client, Kind: Write, Call: call, Return: ret, Fence: f, Value: EncodeValue(client, f, 1), Outcome: out, Stored: stored}
}

func rd(call, ret int64, value string, f uint64) Op {
	return Op{Client: 9, Kind: Read, Call: call, Return: ret, Value: value, Stored: f, Outcome: OK}
}

func history(ops ...Op) *History {
	h := NewHistory()
	for _, op := range ops {
		h.Add(op)
	}
	return h
}

func TestCheck_AcceptsAFencedHistoryWithRefusalsAndUnknowns(t *testing.T) {
	h := history(
		Op{Client: 0, Kind: Acquire, Call: 0, Return: 1, Fence: 10, Outcome: OK},
		w(0, 2, 3, 10, OK, 0),
		Op{Client: 0, Kind: Release, Call: 3, Return: 4, Fence: 10, Outcome: OK},
		Op{Client: 1, Kind: Acquire, Call: 2, Return: 5, Fence: 20, Outcome: OK},
		w(1, 6, Open, 20, Unknown, 0),
		Op{Client: 1, Kind: Release, Call: 6, Return: 8, Fence: 20, Outcome: OK},
		w(0, 7, 9, 15, Stale, 20), // the unknown write applied before this refusal
		rd(10, 11, EncodeValue(1, 20, 1), 20),
	)
	r := Check("legal", h, CheckOptions{MutexPromised: true, StrictStale: true, Dir: t.TempDir()})
	if !r.OK() || r.Resource != porcupine.Ok || r.Mutex != porcupine.Ok || r.StaleAccepted != 0 {
		t.Fatalf("legal history refused: %v", r)
	}
	if r.Accepted != 1 || r.StaleRefused != 1 || r.Unknown != 1 || r.Holds != 2 || r.Reads != 1 {
		t.Fatalf("counts wrong: %v", r)
	}
}

func TestCheck_FindsAStaleWriteAcceptedAndWritesTheHistory(t *testing.T) {
	dir := t.TempDir()
	h := history(
		w(1, 0, 1, 20, OK, 0),
		w(0, 2, 3, 10, OK, 0), // fence 10 accepted after 20 was: stale
	)
	r := Check("stale/accepted", h, CheckOptions{StrictStale: true, Dir: dir})
	if r.OK() || r.StaleAccepted != 1 || r.Resource != porcupine.Illegal {
		t.Fatalf("stale write not found: %v", r)
	}
	if len(r.Files) != 2 {
		t.Fatalf("files %v, want history and resource visualisation", r.Files)
	}
	for _, f := range r.Files {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v", f, err)
		}
		if strings.HasSuffix(f, ".html") && !strings.Contains(string(b), "<html") {
			t.Fatalf("%s is not HTML", f)
		}
	}
}

func TestCheck_FindsALostWriteAndAWrongRefusal(t *testing.T) {
	lost := history(
		w(0, 0, 1, 10, OK, 0),
		rd(2, 3, "", 0), // the accepted write is not there
	)
	if r := Check("lost", lost, CheckOptions{StrictStale: true}); r.Resource != porcupine.Illegal {
		t.Fatalf("lost write not found: %v", r)
	}
	wrongRefusal := history(
		w(0, 0, 1, 10, OK, 0),
		w(1, 2, 3, 20, Stale, 10), // refused although 20 > 10
	)
	if r := Check("refusal", wrongRefusal, CheckOptions{StrictStale: true}); r.Resource != porcupine.Illegal {
		t.Fatalf("wrong refusal not found: %v", r)
	}
	// etcd refuses writes of a lease that lost its lock even when no newer
	// write exists: legal when not strict.
	if r := Check("refusal", wrongRefusal, CheckOptions{StrictStale: false}); r.Resource != porcupine.Ok {
		t.Fatalf("etcd-style refusal refused: %v", r)
	}
}

func TestCheck_FindsOverlappingHolds(t *testing.T) {
	h := history(
		Op{Client: 0, Kind: Acquire, Call: 0, Return: 1, Fence: 10, Outcome: OK},
		Op{Client: 1, Kind: Acquire, Call: 2, Return: 3, Fence: 20, Outcome: OK},
		Op{Client: 0, Kind: Release, Call: 4, Return: 5, Fence: 10, Outcome: OK}, // 0 saw its lease alive at 4
		Op{Client: 1, Kind: Release, Call: 6, Return: 7, Fence: 20, Outcome: OK},
	)
	dir := t.TempDir()
	r := Check("overlap", h, CheckOptions{MutexPromised: true, Dir: dir})
	if r.OK() || r.Mutex != porcupine.Illegal {
		t.Fatalf("overlap not found: %v", r)
	}
	if r := Check("overlap", h, CheckOptions{MutexPromised: false}); !r.OK() {
		t.Fatalf("overlap failed a backend that does not promise exclusion: %v", r)
	}
}

func TestValueFence_RoundTrips(t *testing.T) {
	if f := ValueFence(EncodeValue(3, 1234567890123456, 7)); f != 1234567890123456 {
		t.Fatalf("ValueFence = %d", f)
	}
}
