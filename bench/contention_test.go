package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

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
