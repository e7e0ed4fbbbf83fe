package fleet_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/fleet/redisstore"
	"github.com/lockgov/lockgov/internal/testenv"
)

// faultStore is an aliasStore that records every value it writes and can
// lose replies: a write whose reply is lost ran on the server, and the
// client sees a timeout.
type faultStore struct {
	*aliasStore
	lose atomic.Int32 // replies still to lose

	mu      sync.Mutex
	written [][]byte
}

func (s *faultStore) Swap(ctx context.Context, instance string, value []byte, ttl time.Duration) ([]byte, error) {
	prev, err := s.aliasStore.Swap(ctx, instance, value, ttl)
	if err == nil {
		s.mu.Lock()
		s.written = append(s.written, value)
		s.mu.Unlock()
		if s.lose.Add(-1) >= 0 {
			return nil, context.DeadlineExceeded
		}
		s.lose.Store(0)
	}
	return prev, err
}

// since returns the values written from the n-th on.
func (s *faultStore) since(n int) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.written[n:])
}

func (s *faultStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.written)
}

type faultPair struct {
	c      *redis.Client
	sa, sb *faultStore
	a, b   *fleet.Attachment
	logs   *syncBuffer
}

// faultSiblings attaches two publishers of inst to one Redis under two IDs,
// each tracking a lock, logging into one buffer, and waits until a beat
// lists both locks.
func faultSiblings(t *testing.T, c *redis.Client, inst string, loseB int32) *faultPair {
	t.Helper()
	rs := redisstore.New(c)
	p := &faultPair{c: c, logs: &syncBuffer{}}
	p.sa = &faultStore{aliasStore: alias(rs, "a")}
	p.sb = &faultStore{aliasStore: alias(rs, "b")}
	p.sb.lose.Store(loseB)
	logger := slog.New(slog.NewTextHandler(p.logs, nil))
	attach := func(s fleet.Store) *fleet.Attachment {
		a, err := fleet.Attach(s, fleet.WithInstance(inst), fleet.WithInterval(interval), fleet.WithLogger(logger), fleet.WithRegisterer(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
		return a
	}
	p.a = attach(p.sa)
	p.a.TrackHeld("one", fleet.HeldLock{Key: "lock:one", Pattern: "lock:one", Backend: "redis", Since: time.Now()})
	eventually(t, "a's first beat", func() bool { return p.sa.count() >= 1 })
	p.b = attach(p.sb)
	p.b.TrackHeld("two", fleet.HeldLock{Key: "lock:two", Pattern: "lock:two", Backend: "redis", Since: time.Now()})
	return p
}

// mark returns how many beats each publisher has written.
func (p *faultPair) mark() (na, nb int) { return p.sa.count(), p.sb.count() }

// listBoth waits for five beats of each publisher after na and nb (see
// mark) and checks that every one of them lists both locks, and that no
// "another process" line was logged.
func (p *faultPair) listBoth(t *testing.T, what string, na, nb int) {
	t.Helper()
	eventually(t, what+": five beats of each", func() bool { return p.sa.count() >= na+5 && p.sb.count() >= nb+5 })
	for _, w := range [][][]byte{p.sa.since(na), p.sb.since(nb)} {
		for _, v := range w {
			hb, err := fleet.Decode(v)
			if err != nil {
				t.Fatal(err)
			}
			if got := heldKeys(hb); !slices.Equal(got, []string{"lock:one", "lock:two"}) {
				t.Fatalf("%s: a beat lists %v, want both siblings' locks", what, got)
			}
		}
	}
	if s := p.logs.String(); strings.Contains(s, "another process") {
		t.Fatalf("%s: this process's own beats were logged as another process's:\n%s", what, s)
	}
}

// linked waits until a beat of each publisher lists both locks: both know
// the other, and each beat they write from then on lists both.
func (p *faultPair) linked(t *testing.T, what string) {
	t.Helper()
	both := func(s *faultStore) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.written) == 0 {
			return false
		}
		hb, err := fleet.Decode(s.written[len(s.written)-1])
		return err == nil && slices.Equal(heldKeys(hb), []string{"lock:one", "lock:two"})
	}
	eventually(t, what+": a beat of each listing both locks", func() bool { return both(p.sa) && both(p.sb) })
	na, nb := p.mark()
	p.listBoth(t, what, na, nb)
}

// A Redis restarted without persistence loses the heartbeat key while two
// siblings beat: their next beats find no previous value, and must still
// list what both track, without taking each other for another process.
func TestHeartbeat_SiblingsAcrossARedisRestartWithoutPersistence(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true, MaxRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	const inst = "siblings-restart"
	p := faultSiblings(t, c, inst, 0)
	p.linked(t, "before the restart")
	// Every beat written from now on lists both: the key vanishing says
	// nothing about the siblings.
	na, nb := p.mark()
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	p.listBoth(t, "across the restart", na, nb)
	if err := p.a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.b.Close(); err != nil {
		t.Fatal(err)
	}
	if hb := redisBeat(t, c, inst); hb != nil {
		t.Fatalf("both publishers closed and the heartbeat is left (listing %v)", heldKeys(hb))
	}
}

// A write whose reply is lost ran on the server: every beat of the second
// sibling replaces the first's unseen. The first's next beat finds the link
// for both; no beat after it may list half the process, and the last to
// close deletes the key, whichever closes first, its last replies lost.
func TestHeartbeat_SiblingsWithLostReplies(t *testing.T) {
	for _, bFirst := range []bool{false, true} {
		name := "a-closes-first"
		if bFirst {
			name = "b-closes-first"
		}
		t.Run(name, func(t *testing.T) {
			c := redisClient(t)
			const inst = "siblings-lost-replies"
			p := faultSiblings(t, c, inst, 1<<30)
			p.linked(t, "every reply of b lost")
			p.sb.lose.Store(0)
			first, second, sFirst, sSecond := p.a, p.b, p.sa, p.sb
			if bFirst {
				first, second, sFirst, sSecond = p.b, p.a, p.sb, p.sa
			}
			sFirst.lose.Store(1)
			sSecond.lose.Store(1)
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			n := sSecond.count()
			eventually(t, "two beats of the second alone", func() bool { return sSecond.count() >= n+2 })
			if hb := redisBeat(t, c, inst); hb == nil {
				t.Fatal("the first to close deleted the key the other still writes")
			}
			sSecond.lose.Store(1)
			if err := second.Close(); err != nil {
				t.Fatal(err)
			}
			if hb := redisBeat(t, c, inst); hb != nil {
				t.Fatalf("both publishers closed and the heartbeat is left (listing %v)", heldKeys(hb))
			}
			if s := p.logs.String(); strings.Contains(s, "another process") {
				t.Fatalf("this process's own beats were logged as another process's:\n%s", s)
			}
		})
	}
}

// Both siblings' writes held past the TTL: the key expires, then both
// resume. Their beats list both locks, and neither is taken for another
// process.
func TestHeartbeat_SiblingsPausedPastTheTTL(t *testing.T) {
	c := redisClient(t)
	const inst = "siblings-paused"
	p := faultSiblings(t, c, inst, 0)
	p.linked(t, "before the pause")
	na, nb := p.mark()
	enteredA, releaseA := p.sa.hold(t)
	enteredB, releaseB := p.sb.hold(t)
	enteredA()
	enteredB()
	eventually(t, "the heartbeat expired", func() bool { return redisBeat(t, c, inst) == nil })
	releaseB()
	n := p.sb.count()
	eventually(t, "b beats again alone", func() bool { return p.sb.count() >= n+3 })
	releaseA()
	p.listBoth(t, "across the pause", na, nb)
}
