package redislock_test

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/leakcheck"
	"github.com/lockgov/lockgov/internal/testenv"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

// aloneEnv names, in a child process of inOwnProcess, the test it runs.
const aloneEnv = "REDISLOCK_TEST_ALONE"

// inOwnProcess lets a test whose checks see the whole process (a goleak
// snapshot, as locktest.Run's NoGoroutineSurvives* take) run beside the
// package's parallel tests: in the test binary go test runs, it marks t
// parallel, runs t's test again in a child process of the same binary
// (-test.run naming it alone, so nothing else runs there), fails t if the
// child fails, and returns true: the caller returns at once. In that child
// it returns false, and the caller runs its test, alone in its process.
func inOwnProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(aloneEnv) == t.Name() {
		return false
	}
	t.Parallel()
	run := "^" + regexp.QuoteMeta(t.Name()) + "$"
	if f := flag.Lookup("test.run"); f != nil {
		if _, sub, ok := strings.Cut(f.Value.String(), "/"); ok {
			run += "/" + sub // -run naming some of its subtests
		}
	}
	args := []string{"-test.run=" + run, "-test.count=1", "-test.v"}
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
		args = append(args, "-test.skip="+f.Value.String())
	}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	if dl, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(dl).String())
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), aloneEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	// Prefixed, so that the child's "--- PASS" lines read as its log, not
	// as results of this process's tests.
	t.Logf("%s in a process of its own (%v):\n%s", t.Name(), cmd.ProcessState, "| "+strings.ReplaceAll(strings.TrimRight(string(out), "\n"), "\n", "\n| "))
	if err != nil {
		t.Errorf("%s in a process of its own: %v", t.Name(), err)
	} else if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") && !strings.Contains(string(out), "--- SKIP: "+t.Name()+" ") {
		// A -run the child's pattern rebuilt differently from the parent's
		// (a slash inside a group) can match nothing there: the child then
		// passes with "no tests to run", and so would t.
		t.Errorf("%s in a process of its own: the child did not run it (-test.run=%s)", t.Name(), run)
	}
	return true
}

// newClient dials addr the way lockgov recommends: context deadlines bound
// every call, and a small pool. Each of mutate, if any, then changes the
// options (a Dialer of the test's own, say).
func newClient(t testing.TB, addr string, mutate ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaxRetries:            1,
		PoolSize:              32,
		// A dead node (killed server, quorum tests) answers "connection
		// refused" at once; do not spend the node timeout re-dialling it.
		DialerRetries:      1,
		DialerRetryTimeout: time.Millisecond,
	}
	for _, m := range mutate {
		m(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newLocker(t testing.TB, c redis.UniversalClient, opts ...redislock.Option) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	// The Locker's pub/sub reader outlives Acquire (until the idle timeout):
	// close it before goleak looks. Registered after the client's cleanup,
	// so it runs first.
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// passThrough is the part of a go-redis hook that wraps only single
// commands: it passes dials and pipelines on. Hooks embed it and define
// ProcessHook.
type passThrough struct{}

func (passThrough) DialHook(next redis.DialHook) redis.DialHook { return next }
func (passThrough) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// setup starts a private redis-server and returns a client to it.
func setup(t testing.TB) (*testenv.Redis, *redis.Client) {
	t.Helper()
	r := testenv.NewRedis(t)
	return r, newClient(t, r.Addr())
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

// renewedSignal returns the option of an Acquire with ttl whose watchdog
// renewals are signalled on the returned channel (one pending at most).
func renewedSignal(ttl time.Duration) (instrument.AcquireOption, <-chan struct{}) {
	renewed := make(chan struct{}, 1)
	cfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(ttl))
	cfg.Observer = instrument.ObserverFuncs{OnRenewed: func(err error) {
		if err == nil {
			select {
			case renewed <- struct{}{}:
			default:
			}
		}
	}}
	return instrument.WithConfig(cfg), renewed
}

// deleter is a conformance loser: it deletes the lock key through admin.
func deleter(admin redis.UniversalClient) func(t *testing.T, key string) {
	return func(t *testing.T, key string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := admin.Del(ctx, key).Err(); err != nil {
			t.Fatalf("delete lock key: %v", err)
		}
	}
}

// warmUp takes and releases a lock through l, so that its scripts are
// loaded and a connection pooled: a test that drops the next reply through
// a proxy then drops its own command's, not a SCRIPT LOAD's or a dial's.
func warmUp(t testing.TB, ctx context.Context, l instrument.Locker, opts ...instrument.AcquireOption) {
	t.Helper()
	warm, err := l.Acquire(ctx, "lock:warm-up", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
