package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestTokenRing_AContenderThatNeverAsksStrandsNobody: the floor's token goes only to
// contenders that have asked for it, so one whose goroutine never ran (it started after the
// run's end) does not swallow the token while the others wait; the others stop as contend's
// contenders do (no new wait after the end), every wait ends, and the token is never held
// by two contenders at once.
func TestTokenRing_AContenderThatNeverAsksStrandsNobody(t *testing.T) {
	r := testenv.NewRedis(t)
	e := &env{redisAddr: r.Addr()}
	newContender := tokenRing()
	acq := make([]acquireFunc, contenders)
	for i := range acq {
		a, cleanup, err := newContender(e, "lock:test:ring")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cleanup)
		acq[i] = a
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		holding int
		turns   = make([]int, contenders)
		wg      sync.WaitGroup
	)
	end := time.Now().Add(300 * time.Millisecond)
	for i := range contenders - 1 { // the last contender never asks
		wg.Go(func() {
			for time.Now().Before(end) {
				release, err := acq[i](ctx)
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
					return
				}
				mu.Lock()
				holding++
				if holding != 1 {
					t.Errorf("contender %d holds the token with %d others", i, holding-1)
				}
				turns[i]++
				holding--
				mu.Unlock()
				if err := release(ctx); err != nil {
					t.Errorf("contender %d: release: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, n := range turns[:contenders-1] {
		if n == 0 {
			t.Errorf("contender %d never held the token", i)
		}
	}
}

// TestMeasureRoundTrips_EveryKindPerRound: every round adds pingsPerRound messages of each
// kind, measured (non-zero), and counts itself; the subscriber's goroutine ends with it.
func TestMeasureRoundTrips_EveryKindPerRound(t *testing.T) {
	r := testenv.NewRedis(t)
	e := &env{redisAddr: r.Addr()}
	var rt roundTrips
	for range 2 {
		if err := measureRoundTrips(context.Background(), e, &rt); err != nil {
			t.Fatal(err)
		}
	}
	if want := 2 * pingsPerRound; rt.rounds != 2 || len(rt.hot) != want || len(rt.idle) != want || len(rt.notify) != want {
		t.Fatalf("rounds %d, %d back-to-back PINGs, %d after idle, %d notifications; want 2 and %d of each", rt.rounds, len(rt.hot), len(rt.idle), len(rt.notify), want)
	}
	for _, d := range slices.Concat(rt.hot, rt.idle, rt.notify) {
		if d <= 0 {
			t.Fatalf("a round trip of %v", d)
		}
	}
}

// TestClassifyScripts_FloorByDigestReleaseByKeyCount: the floor's calls are told by their
// digest, lockgov's release by its five keys with a tombstone second (as EVALSHA or as the
// EVAL fallback after a NOSCRIPT); the queued acquire (four keys), another script with five
// keys, other scripts and the commands logged from inside scripts are left out.
func TestClassifyScripts_FloorByDigestReleaseByKeyCount(t *testing.T) {
	floorSHA := handoffFloor.Hash()
	entries := []redis.SlowLog{
		{Args: []string{"evalsha", floorSHA, "4", "k"}, Duration: 30 * time.Microsecond},
		{Args: []string{"EVALSHA", "aaaa", "5", "lock", "{lock}:rel:0a1b", "{lock}:queue"}, Duration: 60 * time.Microsecond},
		{Args: []string{"eval", "local cur = ... (2000 more bytes)", "5", "lock", "{lock}:rel:2c3d", "{lock}:queue"}, Duration: 90 * time.Microsecond},
		{Args: []string{"evalsha", "bbbb", "4", "lock", "{lock}:fence"}, Duration: 50 * time.Microsecond}, // queued acquire
		{Args: []string{"evalsha", "cccc", "5", "lock", "{lock}:queue"}, Duration: 40 * time.Microsecond}, // five keys, no tombstone
		{Args: []string{"evalsha", "dddd", "5"}, Duration: 40 * time.Microsecond},                         // truncated
		{Args: []string{"SET", "k", "v"}, Duration: 7 * time.Microsecond},
		{Args: []string{"evalsha", floorSHA, "4", "k"}, Duration: 20 * time.Microsecond},
		{Args: []string{"ping"}, Duration: 6 * time.Microsecond},
	}
	floor, release := classifyScripts(entries, floorSHA)
	if want := []time.Duration{20 * time.Microsecond, 30 * time.Microsecond}; !slices.Equal(floor, want) {
		t.Errorf("floor = %v, want %v", floor, want)
	}
	if want := []time.Duration{60 * time.Microsecond, 90 * time.Microsecond}; !slices.Equal(release, want) {
		t.Errorf("release = %v, want %v", release, want)
	}
}

// TestMeasureScriptTimes_ReadsEveryReleaseOfTheRealLibrary runs the pass briefly against a
// real redis-server with every command logged (threshold 0, so that no script is left out for
// being fast on a fast machine): every one of lockgov's releases is found by its keys (so a
// change to release.lua's keys that would make the doc's reading silently empty or wrong
// fails here), every floor script by its digest, and the server's slowlog settings are back
// as they were.
func TestMeasureScriptTimes_ReadsEveryReleaseOfTheRealLibrary(t *testing.T) {
	r := testenv.NewRedis(t)
	e := &env{redisAddr: r.Addr()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := newRedis(e)
	defer func() { _ = admin.Close() }()
	before, err := admin.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		t.Fatal(err)
	}
	st, err := measureScriptTimes(ctx, e, contImpls(), 300*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !st.measured() {
		t.Fatalf("nothing read: %d floor scripts, %d releases", len(st.floor), len(st.release))
	}
	// Every acquisition of the pass is released once, by one script call: a release with
	// nobody queued runs release.lua with the same five keys, and the floor releases through
	// its script every time.
	if len(st.release) != st.waitAcq {
		t.Errorf("%d releases read for %d acquisitions", len(st.release), st.waitAcq)
	}
	if len(st.floor) != st.floorAcq {
		t.Errorf("%d floor scripts read for %d acquisitions", len(st.floor), st.floorAcq)
	}
	after, err := admin.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
		if before[k] != after[k] {
			t.Errorf("%s = %s after the pass, was %s", k, after[k], before[k])
		}
	}
}
