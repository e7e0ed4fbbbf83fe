package main

import (
	"slices"
	"testing"
)

// Every round runs every case once, the same order in every run, and over the rounds of a
// run each case follows at least three different cases: a fixed predecessor biased the
// figures.
func TestRoundOrder_APermutationWithChangingNeighbours(t *testing.T) {
	cases := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	preds := make([]map[int]bool, len(cases))
	for i := range preds {
		preds[i] = map[int]bool{}
	}
	for round := range 10 {
		got := roundOrder(cases, round)
		if again := roundOrder(cases, round); !slices.Equal(got, again) {
			t.Fatalf("round %d: %v then %v: the order must be the same in every run", round, got, again)
		}
		if sorted := slices.Sorted(slices.Values(got)); !slices.Equal(sorted, cases) {
			t.Fatalf("round %d: %v is not a permutation of %v", round, got, cases)
		}
		for i := 1; i < len(got); i++ {
			preds[got[i]][got[i-1]] = true
		}
	}
	if !slices.Equal(cases, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("roundOrder changed its argument: %v", cases)
	}
	for c, p := range preds {
		if len(p) < 3 { // rotating the order gives every case 1 (2 counting the round it is first)
			t.Errorf("case %d followed only %d distinct cases in 10 rounds: %v", c, len(p), p)
		}
	}
}
