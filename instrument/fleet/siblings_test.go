package fleet_test

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/fleet/etcdstore"
	"github.com/lockgov/lockgov/instrument/fleet/redisstore"
	"github.com/lockgov/lockgov/internal/testenv"
)

func heldKeys(hb *fleet.Heartbeat) []string {
	if hb == nil {
		return nil
	}
	var keys []string
	for _, h := range hb.Held {
		keys = append(keys, h.Key)
	}
	slices.Sort(keys)
	return keys
}

// secondAddress returns a client of c's Redis under another address
// ("localhost" for "127.0.0.1"): to lockgov, another store.
func secondAddress(t *testing.T, c *redis.Client) *redis.Client {
	t.Helper()
	_, port, err := net.SplitHostPort(c.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	c2 := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("localhost", port), ContextTimeoutEnabled: true, MaxRetries: 1})
	t.Cleanup(func() { _ = c2.Close() })
	if err := c2.Ping(ctxFor(t, 5*time.Second)).Err(); err != nil {
		t.Skipf("localhost does not reach %s: %v", c.Options().Addr, err)
	}
	return c2
}

// One process reaching one store under two addresses (two clients of one
// Redis, a Sentinel client and a direct one, two etcd clients with other
// endpoint lists) has two publishers, one per address, writing one
// heartbeat key. Each beat lists what the whole process holds there, not
// what one publisher's Lockers hold: the agent builds its wait-for graph
// from the beat it reads, and half of it hides deadlocks.
func TestHeartbeat_OneStoreUnderTwoAddressesListsEveryLockOfTheProcess(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		c := redisClient(t)
		c2 := secondAddress(t, c)
		const inst = "two-addresses"
		oneStoreTwoIDs(t, inst, redisstore.New(c), redisstore.New(c2), func() *fleet.Heartbeat { return redisBeat(t, c, inst) })
	})
	t.Run("etcd", func(t *testing.T) {
		e := testenv.NewEtcd(t)
		c := e.Client(t)
		u, err := url.Parse(e.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		u.Host = net.JoinHostPort("localhost", u.Port())
		c2 := testenv.NewEtcdClient(t, u.String())
		if _, err := c2.Get(ctxFor(t, 5*time.Second), "probe"); err != nil {
			t.Skipf("localhost does not reach %s: %v", e.Endpoint(), err)
		}
		const inst = "two-endpoints"
		oneStoreTwoIDs(t, inst, etcdstore.New(c), etcdstore.New(c2), func() *fleet.Heartbeat { hb, _ := etcdBeat(t, c, inst); return hb })
	})
}

// oneStoreTwoIDs attaches a publisher to s1 and then one to s2, two IDs of
// one store, each tracking a lock, and checks the beats read by read.
func oneStoreTwoIDs(t *testing.T, inst string, s1, s2 fleet.Store, read func() *fleet.Heartbeat) {
	t.Helper()
	if s1.ID() == s2.ID() {
		t.Fatalf("both clients have store ID %q: the test needs two", s1.ID())
	}
	reg1, reg2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	opts := func(reg prometheus.Registerer) []fleet.Option {
		return []fleet.Option{fleet.WithInstance(inst), fleet.WithInterval(interval), fleet.WithLogger(quiet), fleet.WithRegisterer(reg)}
	}
	a1, err := fleet.Attach(s1, opts(reg1)...)
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	backend := s1.Backend()
	a1.TrackHeld("one", fleet.HeldLock{Key: "lock:one", Pattern: "lock:one", Backend: backend, Since: time.Now()})
	eventually(t, "the first publisher's beat", func() bool { return beats(t, reg1, "ok") >= 1 })

	a2, err := fleet.Attach(s2, opts(reg2)...)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	a2.TrackHeld("two", fleet.HeldLock{Key: "lock:two", Pattern: "lock:two", Backend: backend, Since: time.Now()})
	// The second publisher's first beat replaces the first's: from then on
	// both know of each other. A beat of the first that was in flight then
	// may still list its half; two more of its beats are past it.
	eventually(t, "the second publisher's beat", func() bool { return beats(t, reg2, "ok") >= 1 })
	n1 := beats(t, reg1, "ok")
	eventually(t, "two more beats of the first", func() bool { return beats(t, reg1, "ok") >= n1+2 && beats(t, reg2, "ok") >= 2 })

	want := []string{"lock:one", "lock:two"}
	for range 20 {
		if got := heldKeys(read()); !slices.Equal(got, want) {
			t.Fatalf("heartbeat lists %v, want %v (every lock the process holds in this store)", got, want)
		}
		time.Sleep(interval / 2)
	}

	// One publisher stopping leaves the other's beat in place: its delete
	// would hide the process until the other's next beat.
	if err := a1.Close(); err != nil {
		t.Fatal(err)
	}
	if hb := read(); hb == nil {
		t.Fatal("closing one of the two publishers deleted the heartbeat the other still writes")
	}
	// A beat of the second in flight at Close may still list both; the
	// one after it started with the first stopped.
	n2 := beats(t, reg2, "ok")
	eventually(t, "a beat of the second alone", func() bool { return beats(t, reg2, "ok") >= n2+2 })
	if got, want := heldKeys(read()), []string{"lock:two"}; !slices.Equal(got, want) {
		t.Fatalf("after the first publisher closed, heartbeat lists %v, want %v", got, want)
	}
	if err := a2.Close(); err != nil {
		t.Fatal(err)
	}
	if hb := read(); hb != nil {
		t.Fatalf("the last publisher closed and left its heartbeat: %+v", hb)
	}
}

// Two processes configured with one instance name overwrite each other's
// heartbeat, and the agent sees one of them at a time. The publisher says
// so in its log when a beat replaces another process's beat written since
// its own last one; a beat left by the name's previous process (a restart)
// is not that.
func TestHeartbeat_AnotherProcessUnderThisInstanceNameIsLogged(t *testing.T) {
	c := redisClient(t)
	const inst = "shared-name"
	other := func(pid int) []byte {
		b, err := fleet.Encode(&fleet.Heartbeat{Instance: inst, Service: "other", Host: "other-host", PID: pid,
			StartedAt: time.Now(), SentAt: time.Now(), Interval: interval})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The name's previous process left its beat.
	if err := c.Set(ctxFor(t, 5*time.Second), fleet.RedisKey(inst), other(1), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	logs, reg := attachLogged(t, c, inst)
	eventually(t, "three beats", func() bool { return beats(t, reg, "ok") >= 3 })
	if s := logs.String(); strings.Contains(s, "another process") {
		t.Fatalf("a beat left before this publisher started was logged as another process's:\n%s", s)
	}

	// Another live process writes under the name between two beats.
	beatUntilLogged(t, c, inst, other(os.Getpid()+1), logs)
	for _, want := range []string{"instance=" + inst, "other_host=other-host", "other_pid="} {
		if s := logs.String(); !strings.Contains(s, want) {
			t.Errorf("log line lacks %q:\n%s", want, s)
		}
	}
}

// attachLogged attaches a publisher of inst to c's Redis that logs into
// the returned buffer and counts its beats on the returned registry; it is
// closed when the test ends.
func attachLogged(t *testing.T, c *redis.Client, inst string) (*syncBuffer, *prometheus.Registry) {
	t.Helper()
	logs, reg := &syncBuffer{}, prometheus.NewRegistry()
	a, err := fleet.Attach(redisstore.New(c), fleet.WithInstance(inst), fleet.WithInterval(interval),
		fleet.WithRegisterer(reg), fleet.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return logs, reg
}

// beatUntilLogged writes value as inst's heartbeat, again and again as a
// live process beating under that name does, until the publisher logs
// "another process". One write is not enough on a loaded machine: a beat
// whose reply is lost (it ran, and the client's timeout ended it) replaced
// that write unseen, as it would one of a real process, whose next beat
// brings the evidence back.
func beatUntilLogged(t *testing.T, c *redis.Client, inst string, value []byte, logs *syncBuffer) {
	t.Helper()
	eventually(t, "the log line of another process", func() bool {
		if strings.Contains(logs.String(), "another process") {
			return true
		}
		if err := c.Set(ctxFor(t, 5*time.Second), fleet.RedisKey(inst), value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		return false
	})
}

// aliasStore is one Redis under another ID, as a client of it under another
// address is to lockgov. A write held with hold waits until released: a
// beat in flight, which reaches the server late (past the beat's deadline).
type aliasStore struct {
	*redisstore.Store
	id   string
	held atomic.Pointer[heldWrite]
}

type heldWrite struct{ entered, release chan struct{} }

func alias(s *redisstore.Store, name string) *aliasStore {
	return &aliasStore{Store: s, id: s.ID() + "#" + name}
}

func (s *aliasStore) ID() string { return s.id }

// hold holds the next write until the returned release is called; entered
// waits until that write is in flight.
func (s *aliasStore) hold(t *testing.T) (entered func(), release func()) {
	t.Helper()
	h := &heldWrite{entered: make(chan struct{}), release: make(chan struct{})}
	s.held.Store(h)
	var once sync.Once
	release = func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(release)
	entered = func() {
		t.Helper()
		select {
		case <-h.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("gave up waiting: a write in flight")
		}
	}
	return entered, release
}

func (s *aliasStore) Swap(ctx context.Context, instance string, value []byte, ttl time.Duration) ([]byte, error) {
	if h := s.held.Swap(nil); h != nil {
		close(h.entered)
		<-h.release
		ctx = context.WithoutCancel(ctx)
	}
	return s.Store.Swap(ctx, instance, value, ttl)
}

func attachAs(t *testing.T, s fleet.Store, inst string, d time.Duration, reg prometheus.Registerer) *fleet.Attachment {
	t.Helper()
	a, err := fleet.Attach(s, fleet.WithInstance(inst), fleet.WithInterval(d), fleet.WithLogger(quiet), fleet.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// Two siblings stopping together, one with a beat in flight: the write
// lands after the other, the last to stop by the time Close was called,
// deleted the key. The heartbeat of a process that stopped publishing
// must not outlive it (the agent would list its locks as held for three
// more intervals): the last sibling to finish its writes deletes the key.
func TestHeartbeat_SiblingsStoppingWithABeatInFlightLeaveNoHeartbeat(t *testing.T) {
	c := redisClient(t)
	const inst = "siblings-stopping"
	rs := redisstore.New(c)
	sa, sb := alias(rs, "a"), alias(rs, "b")
	a := attachAs(t, sa, inst, interval, prometheus.NewRegistry())
	a.TrackHeld("one", fleet.HeldLock{Key: "lock:one", Pattern: "lock:one", Backend: "redis", Since: time.Now()})
	b := attachAs(t, sb, inst, interval, prometheus.NewRegistry())
	b.TrackHeld("two", fleet.HeldLock{Key: "lock:two", Pattern: "lock:two", Backend: "redis", Since: time.Now()})
	eventually(t, "siblings: a beat listing both locks", func() bool {
		return slices.Equal(heldKeys(redisBeat(t, c, inst)), []string{"lock:one", "lock:two"})
	})

	entered, release := sa.hold(t)
	entered() // a's beat is in flight
	closedA := make(chan error, 1)
	go func() { closedA <- a.Close() }()
	// b's beats stop listing a's lock once a has stopped.
	eventually(t, "a beat of b alone", func() bool {
		return slices.Equal(heldKeys(redisBeat(t, c, inst)), []string{"lock:two"})
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	release() // a's write lands
	if err := <-closedA; err != nil {
		t.Fatal(err)
	}
	if hb := redisBeat(t, c, inst); hb != nil {
		t.Fatalf("both publishers closed and the heartbeat is left (listing %v) until it expires", heldKeys(hb))
	}
}

// Three IDs of one store: the second publisher's beat replaces the first's,
// the third's the second's. All three write one key, so all three are
// siblings: the first stopping after the second must leave the key to the
// third, and the third's beats must list the first's locks.
func TestHeartbeat_ThreeAddressesOfOneStoreAreAllSiblings(t *testing.T) {
	c := redisClient(t)
	const inst = "three-addresses"
	rs := redisstore.New(c)
	// One beat each, at Attach: the interval never comes round.
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry(), prometheus.NewRegistry()}
	var atts []*fleet.Attachment
	for i, name := range []string{"one", "two", "three"} {
		a := attachAs(t, alias(rs, name), inst, time.Hour, regs[i])
		a.TrackHeld(name, fleet.HeldLock{Key: "lock:" + name, Pattern: "lock:" + name, Backend: "redis", Since: time.Now()})
		atts = append(atts, a)
		eventually(t, "the beat of publisher "+name, func() bool { return beats(t, regs[i], "ok") >= 1 })
	}
	if err := atts[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := atts[0].Close(); err != nil {
		t.Fatal(err)
	}
	if hb := redisBeat(t, c, inst); hb == nil {
		t.Fatal("the first publisher closed and deleted the heartbeat the third still writes")
	}
	if err := atts[2].Close(); err != nil {
		t.Fatal(err)
	}
	if hb := redisBeat(t, c, inst); hb != nil {
		t.Fatalf("the last publisher closed and left its heartbeat: %+v", hb)
	}
}

// Two containers sharing the host's network (Docker --network host,
// Kubernetes hostNetwork) have one host name, and each runs its service as
// pid 1: they share the default instance name, host name plus pid, and
// overwrite each other's heartbeat. A beat of the same host and pid is not
// this process's unless one of this process's publishers wrote it.
func TestHeartbeat_AnotherProcessOfTheSameHostAndPIDIsLogged(t *testing.T) {
	for _, stamp := range []string{"", "0123456789abcdef-0123456789abcdef"} {
		t.Run("stamp="+stamp, func(t *testing.T) {
			c := redisClient(t)
			const inst = "host-1"
			host, _ := os.Hostname()
			logs, reg := attachLogged(t, c, inst)
			eventually(t, "a beat", func() bool { return beats(t, reg, "ok") >= 1 })
			b, err := fleet.Encode(&fleet.Heartbeat{Publisher: stamp, Instance: inst, Service: "other", Host: host, PID: os.Getpid(),
				StartedAt: time.Now(), SentAt: time.Now(), Interval: interval})
			if err != nil {
				t.Fatal(err)
			}
			beatUntilLogged(t, c, inst, b, logs)
		})
	}
}

// A sibling's last beat, written as it stopped, is replaced by the other's
// next: that is this process's own beat, not another process's.
func TestHeartbeat_AStoppedSiblingsLastBeatIsNotAnotherProcess(t *testing.T) {
	c := redisClient(t)
	const inst = "sibling-stopped"
	rs := redisstore.New(c)
	sa, sb := alias(rs, "a"), alias(rs, "b")
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	regB := prometheus.NewRegistry()
	attach := func(s fleet.Store, reg prometheus.Registerer) *fleet.Attachment {
		a, err := fleet.Attach(s, fleet.WithInstance(inst), fleet.WithInterval(interval), fleet.WithLogger(logger), fleet.WithRegisterer(reg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
		return a
	}
	a := attach(sa, prometheus.NewRegistry())
	a.TrackHeld("one", fleet.HeldLock{Key: "lock:one", Pattern: "lock:one", Backend: "redis", Since: time.Now()})
	b := attach(sb, regB)
	b.TrackHeld("two", fleet.HeldLock{Key: "lock:two", Pattern: "lock:two", Backend: "redis", Since: time.Now()})
	eventually(t, "siblings: a beat listing both locks", func() bool {
		return slices.Equal(heldKeys(redisBeat(t, c, inst)), []string{"lock:one", "lock:two"})
	})
	// a's last write lands after a has stopped, after b's beats alone.
	entered, release := sa.hold(t)
	entered()
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	eventually(t, "a beat of b alone", func() bool {
		return slices.Equal(heldKeys(redisBeat(t, c, inst)), []string{"lock:two"})
	})
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	n := beats(t, regB, "ok")
	eventually(t, "two more beats of b", func() bool { return beats(t, regB, "ok") >= n+2 })
	if s := logs.String(); strings.Contains(s, "another process") {
		t.Fatalf("a stopped sibling's last beat was logged as another process's:\n%s", s)
	}
	if got := heldKeys(redisBeat(t, c, inst)); !slices.Equal(got, []string{"lock:two"}) {
		t.Fatalf("heartbeat lists %v, want [lock:two]", got)
	}
}
