package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/store"
)

// TestTheBoundForgetsTheLeastRecentlyUsed: a store of at most max
// states, used at random, forgets exactly the least recently used state
// each time it holds one too many, as a naive model (a list in order of
// use) says. Each take's remaining tells whether its subject was kept
// (its count goes on) or forgotten (it starts afresh).
func TestTheBoundForgetsTheLeastRecentlyUsed(t *testing.T) {
	for _, max := range []int{1, 2, 3, 7} {
		t.Run(fmt.Sprint("max", max), func(t *testing.T) {
			now := time.Unix(1_900_000_000, 0)
			mem := memstore.NewSized(func() time.Time { return now }, max)
			spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 1000, Window: 24 * time.Hour, Enforce: true}
			rng := rand.New(rand.NewPCG(uint64(max), 1))
			var order []string          // the model: most recent first
			count := map[string]int64{} // what the model remembers
			for step := range 2000 {
				tag := fmt.Sprint("t", rng.IntN(max+3))
				res, err := mem.Do(context.Background(), []store.Op{{Kind: store.Take, Spec: spec, Tag: tag, Cost: 1}})
				if err != nil {
					t.Fatal(err)
				}
				if i := slices.Index(order, tag); i >= 0 {
					order = slices.Delete(order, i, i+1)
				} else {
					count[tag] = 0
				}
				order = slices.Insert(order, 0, tag)
				count[tag]++
				for len(order) > max {
					delete(count, order[len(order)-1])
					order = order[:len(order)-1]
				}
				if want := spec.Limit - count[tag]; res[0].Remaining != want {
					t.Fatalf("step %d, %s: remaining %d, want %d (the model's order %v)", step, tag, res[0].Remaining, want, order)
				}
				if mem.Len() != len(order) {
					t.Fatalf("step %d: %d states held, the model %d", step, mem.Len(), len(order))
				}
			}
		})
	}
}

// TestEndedStatesAreForgotten: besides the bound, each operation forgets
// up to two states at the tail whose every part has ended (at their end
// exactly), so that a quiet store does not hold what no longer counts.
func TestEndedStatesAreForgotten(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	mem := memstore.NewSized(func() time.Time { return now }, 1000)
	spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 5, Window: time.Second, Enforce: true}
	take := func(tag string) {
		if _, err := mem.Do(context.Background(), []store.Op{{Kind: store.Take, Spec: spec, Tag: tag, Cost: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		take(fmt.Sprint("old", i))
	}
	now = now.Add(time.Second) // every old window ends now, exactly
	for _, want := range []int{9, 7, 5, 3, 1, 1} {
		take("new")
		if n := mem.Len(); n != want {
			t.Fatalf("%d states held, want %d", n, want)
		}
	}
}

// TestStatesThatHoldNothingAreForgotten: asking about a subject (a peek of
// a sliding window, a ratio, and the store's answer to it mirrored) makes
// a state that holds no count; the store forgets it at once, as it
// forgets ended ones.
func TestStatesThatHoldNothingAreForgotten(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	mem := memstore.NewSized(func() time.Time { return now }, 1000)
	fw := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 5, Window: time.Second, Enforce: true}
	for _, spec := range []*store.Spec{
		{ID: "sw", Algorithm: store.SlidingWindow, Limit: 5, Window: time.Minute, Enforce: true},
		{ID: "ra", Algorithm: store.Ratio, Limit: 50, Min: 5, Window: time.Minute, Enforce: true},
	} {
		for i := range 10 {
			peek := []store.Op{{Kind: store.Peek, Spec: spec, Tag: fmt.Sprint(spec.ID, i), Cost: 1}}
			if _, err := mem.Do(context.Background(), peek); err != nil {
				t.Fatal(err)
			}
			// an answer of the store that counts nothing, told as a backstop
			// is told
			mem.Mirror(peek, []store.OpResult{{Allowed: true, Remaining: spec.Limit, ResetAfter: spec.Window}})
		}
		for range 6 {
			if _, err := mem.Do(context.Background(), []store.Op{{Kind: store.Take, Spec: fw, Tag: "new", Cost: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		if n := mem.Len(); n != 1 {
			t.Errorf("%s: %d states held after peeks of ten subjects and six takes of another, want 1", spec.Algorithm, n)
		}
	}
}
