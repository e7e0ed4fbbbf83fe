package redislock_test

import (
	"bufio"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// connectionsReceived reads total_connections_received from INFO stats: every
// TCP connection the server ever accepted.
func connectionsReceived(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "total_connections_received:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no total_connections_received in INFO stats:\n%s", info)
	return 0
}

// TestContention_NoConnectionPerAcquisition: eight contenders (each its own
// client and Locker, as separate processes would be) take one key 2,000
// times in all, holding it for no time. Waiting for a release must not cost
// a connection: each Locker keeps at most one pub/sub connection while it is
// in use, so the whole run may open at most 16 new connections (8 pub/sub
// connections plus slack; the clients' pools are warmed before counting).
func TestContention_NoConnectionPerAcquisition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []redislock.Option
	}{
		{"default", nil},
		{"fair", []redislock.Option{redislock.Fair()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			const contenders, total, budget = 8, 2000, 16
			const key = "lock:storm"

			lockers := make([]*redislock.Locker, contenders)
			for i := range lockers {
				c := newClient(t, r.Addr())
				if err := c.Ping(timeout(t, 5*time.Second)).Err(); err != nil { // warm the pool
					t.Fatal(err)
				}
				lockers[i] = newLocker(t, c, tc.opts...)
			}
			before := connectionsReceived(t, admin)

			ctx := timeout(t, 2*time.Minute)
			var wg sync.WaitGroup
			for _, l := range lockers {
				wg.Go(func() {
					for range total / contenders {
						// A long TTL keeps the watchdog from renewing during the
						// run: a renewal overlapping an Acquire would take a
						// second pool connection and blur the count.
						lease, err := l.Acquire(ctx, key, instrument.WithTTL(5*time.Minute))
						if err != nil {
							t.Error(err)
							return
						}
						if err := lease.Release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			opened := connectionsReceived(t, admin) - before
			t.Logf("%d new connections for %d acquisitions (%.3f per acquisition)", opened, total, float64(opened)/total)
			if opened > budget {
				t.Errorf("%d contenders opened %d new connections for %d acquisitions (%.2f per acquisition), want <= %d",
					contenders, opened, total, float64(opened)/total, budget)
			}
		})
	}
}

// startWaiter runs a WaitUntilDeadline Acquire of key on l in the background,
// polling only once a minute, so that within its 20 s deadline only a release
// notification (or the notifier's own wake-up) can let it in. waiting closes
// when it waits; done gets its result after it released. Each of held,
// if any, runs while it holds the lock, before its release.
func startWaiter(t *testing.T, l *redislock.Locker, key string, held ...func()) (waiting <-chan struct{}, done <-chan error) {
	t.Helper()
	w := make(chan struct{})
	d := make(chan error, 1)
	var once sync.Once
	cfg, err := instrument.ApplyAcquireOptions(instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Observer = instrument.ObserverFuncs{OnWaiting: func(waiting bool) {
		if waiting {
			once.Do(func() { close(w) })
		}
	}}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		lease, err := l.Acquire(ctx, key, instrument.WithConfig(cfg))
		if err == nil {
			for _, h := range held {
				h()
			}
			err = lease.Release(ctx)
		}
		d <- err
	}()
	return w, d
}

// awaitWaiting returns once the waiter waits; a waiter that returned
// instead fails the test.
func awaitWaiting(t *testing.T, waiting <-chan struct{}, done <-chan error) {
	t.Helper()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("waiter returned before waiting: %v", err)
	}
}

// handOff makes l wait for key behind a holder from other, then releases:
// l must be woken by the release notification.
func handOff(t *testing.T, l, other *redislock.Locker, key string) {
	t.Helper()
	ctx := timeout(t, 30*time.Second)
	holder, err := other.Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiting, done := startWaiter(t, l, key)
	awaitWaiting(t, waiting, done)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v (the release notification did not wake it)", err)
	}
}

// eventually polls cond until it holds or 10 s have passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func subscribers(t *testing.T, c *redis.Client, channel string) int64 {
	t.Helper()
	n, err := c.PubSubNumSub(timeout(t, 5*time.Second), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n[channel]
}

// keySubscribers counts the subscribers of key's release channels: each
// Locker subscribes its own, "{key}:released:<locker id>".
func keySubscribers(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	chans, err := c.PubSubChannels(timeout(t, 5*time.Second), "{"+key+"}:released:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, ch := range chans {
		n += subscribers(t, c, ch)
	}
	return n
}

func pubsubClients(t *testing.T, c *redis.Client) int {
	t.Helper()
	list, err := c.Do(timeout(t, 5*time.Second), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(list) {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// TestWait_SubscriptionKeptBetweenWaits: a second wait on the same key uses
// the connection and the subscription the first one left.
func TestWait_SubscriptionKeptBetweenWaits(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	l := newLocker(t, newClient(t, r.Addr()))
	other := newLocker(t, newClient(t, r.Addr()))
	const key = "lock:kept"

	handOff(t, l, other, key)
	if n := keySubscribers(t, admin, key); n != 1 {
		t.Fatalf("%d subscribers after the wait, want 1 (the kept subscription)", n)
	}
	before := connectionsReceived(t, admin)
	handOff(t, l, other, key)
	if n := connectionsReceived(t, admin) - before; n != 0 {
		t.Fatalf("the second wait opened %d connections, want 0", n)
	}
}

// TestWait_IdleConnectionClosesAfterIdleTimeout: with nobody waiting, the
// subscription and the connection go after the idle timeout, the reader
// goroutine with them, and the next wait opens them again.
func TestWait_IdleConnectionClosesAfterIdleTimeout(t *testing.T) {
	// goleak.Find against an IgnoreCurrent snapshot: serial.
	r, admin := setup(t)
	c := newClient(t, r.Addr())
	if err := c.Ping(timeout(t, 5*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, newClient(t, r.Addr()))
	base := goleak.IgnoreCurrent()
	l := newLocker(t, c, redislock.WithIdleTimeout(100*time.Millisecond))
	const key = "lock:idle"

	handOff(t, l, other, key)
	eventually(t, "the idle pub/sub connection closed", func() bool { return pubsubClients(t, admin) == 0 })
	eventually(t, "the reader goroutine exited", func() bool { return goleak.Find(base) == nil })

	handOff(t, l, other, key)
}

// TestWait_IdleSubscriptionsBounded: a Locker that waited on more keys than
// MaxIdleChannels keeps no more subscriptions than that.
func TestWait_IdleSubscriptionsBounded(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	l := newLocker(t, newClient(t, r.Addr()))
	other := newLocker(t, newClient(t, r.Addr()))
	keys := redislock.MaxIdleChannels + 20
	for i := range keys {
		handOff(t, l, other, "lock:order:"+strconv.Itoa(i))
	}
	var chans []string
	eventually(t, "unsubscribes processed", func() bool {
		var err error
		chans, err = admin.PubSubChannels(timeout(t, 5*time.Second), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(chans) <= redislock.MaxIdleChannels
	})
	// The most recent keys are the ones kept.
	if n := keySubscribers(t, admin, "lock:order:"+strconv.Itoa(keys-1)); n != 1 {
		t.Fatalf("the last key's channel has %d subscribers, want 1", n)
	}
}

// TestWait_WakeUpNotLostAcrossReconnect kills the pub/sub connection while a
// waiter waits and releases at once: the release may be published before the
// notifier has resubscribed, and the waiter (polling once a minute) must
// still get the lock well within its 20 s deadline, and the next wait must
// be notified again.
func TestWait_WakeUpNotLostAcrossReconnect(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	l := newLocker(t, newClient(t, r.Addr()))
	other := newLocker(t, newClient(t, r.Addr()))
	const key = "lock:reconnect"
	ctx := timeout(t, 30*time.Second)

	for range 3 {
		holder, err := other.Acquire(ctx, key, instrument.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		waiting, done := startWaiter(t, l, key)
		awaitWaiting(t, waiting, done)
		eventually(t, "the waiter subscribed", func() bool { return keySubscribers(t, admin, key) == 1 })
		if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("waiter: %v (the release during the reconnect was missed)", err)
		}
	}
	handOff(t, l, other, key)
}

// TestClose_EndsWaitsAndRefusesAcquire: Close wakes a waiting Acquire with
// ErrClosed, closes the connection, leaves no goroutine, refuses later
// Acquire calls with an error naming it, and can be called again.
func TestClose_EndsWaitsAndRefusesAcquire(t *testing.T) {
	// goleak.Find against an IgnoreCurrent snapshot: serial.
	r, admin := setup(t)
	c := newClient(t, r.Addr())
	if err := c.Ping(timeout(t, 5*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, newClient(t, r.Addr()))
	ctx := timeout(t, 30*time.Second)
	const key = "lock:close"
	holder, err := other.Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	base := goleak.IgnoreCurrent()
	l, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}

	waiting, done := startWaiter(t, l, key)
	awaitWaiting(t, waiting, done)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, redislock.ErrClosed) {
		t.Fatalf("waiting Acquire after Close = %v, want ErrClosed", err)
	}
	if err := goleak.Find(base); err != nil {
		t.Fatalf("goroutines left after Close: %v", err)
	}
	eventually(t, "the pub/sub connection closed", func() bool { return pubsubClients(t, admin) == 0 })

	_, err = l.Acquire(ctx, "lock:other", instrument.FailFast())
	if !errors.Is(err, redislock.ErrClosed) || !strings.Contains(err.Error(), "Close") {
		t.Fatalf("Acquire after Close = %v, want ErrClosed naming Close", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestNew_IdleTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := redislock.New(c, redislock.WithIdleTimeout(d)); !errors.Is(err, instrument.ErrInvalidOption) || !strings.Contains(err.Error(), "idle timeout") {
			t.Errorf("WithIdleTimeout(%v): %v, want ErrInvalidOption naming the idle timeout", d, err)
		}
	}
}

// Back-off steps are jittered within [d/2, d], so that the retries of many
// processes that failed in one outage (reconnections, leaves) do not reach
// the server in step when it returns.
func TestBackOff_StepsAreJitteredWithinHalfToFull(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, 1, 50 * time.Millisecond, time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			got := redislock.Jittered(d)
			if got < d/2 || got > d {
				t.Fatalf("Jittered(%v) = %v, want within [%v, %v]", d, got, d/2, d)
			}
			seen[got] = true
		}
		if d >= time.Millisecond && len(seen) < 100 {
			t.Errorf("Jittered(%v): %d distinct waits in 200 draws: not spread", d, len(seen))
		}
	}
}
