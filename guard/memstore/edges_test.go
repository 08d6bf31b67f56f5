package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/localredis"
)

const edgeTag = "AAAAAAAAAAAAAAAAAAAAAA"

// bothStores runs f with the Lua library (on the embedded Redis) and
// memstore, on one clock that set moves.
func bothStores(t *testing.T, f func(t *testing.T, st guard.Store, set func(time.Time))) {
	t.Helper()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.SetTime(now)
	t.Run("lua", func(t *testing.T) {
		f(t, redisstore.New(srv.Client(), redisstore.Options{}), func(at time.Time) {
			srv.FastForward(at.Sub(now))
			now = at
			srv.SetTime(at)
		})
	})
	mnow := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	t.Run("memstore", func(t *testing.T) {
		f(t, memstore.New(func() time.Time { return mnow }), func(at time.Time) { mnow = at })
	})
}

// TestATakeOfMoreThanTheLimitIsNeverAdmitted: a request for more units
// than a rule's limit (AllowN with n over it) is denied by every
// algorithm, on an empty state, with a wait past the window (the state
// would never hold it) and, where nothing is held, nothing to reset;
// both stores answer alike.
func TestATakeOfMoreThanTheLimitIsNeverAdmitted(t *testing.T) {
	w := 10 * time.Second
	bothStores(t, func(t *testing.T, st guard.Store, _ func(time.Time)) {
		for _, spec := range []*guard.Spec{
			{ID: "sw", Algorithm: guard.SlidingWindow, Limit: 2, Window: w, Enforce: true},
			{ID: "sl", Algorithm: guard.SlidingLog, Limit: 2, Window: w, Enforce: true},
			{ID: "fw", Algorithm: guard.FixedWindow, Limit: 2, Window: w, Enforce: true},
		} {
			res, err := st.Do(context.Background(), []guard.Op{{Kind: guard.Take, Spec: spec, Tag: edgeTag, Cost: 3, Member: "m1"}})
			if err != nil {
				t.Fatal(err)
			}
			r := res[0]
			if r.Allowed || r.Taken != 0 || r.Remaining != 2 || r.RetryAfter < w {
				t.Errorf("%s: a take of 3 under a limit of 2: %+v", spec.Algorithm, r)
			}
			if spec.Algorithm == guard.SlidingWindow && (r.ResetAfter != 0 || r.RetryAfter < 2*w) {
				t.Errorf("%s: nothing held: reset %s, retry %s (want 0, and two windows at least)", spec.Algorithm, r.ResetAfter, r.RetryAfter)
			}
		}
	})
}

// TestASkippedAnswerTellsTheBackstopNothing: a result the store skipped
// (its request denied by another rule first) or that did not apply (a
// device condition) holds no count: mirrored, it leaves the backstop's
// state as it was.
func TestASkippedAnswerTellsTheBackstopNothing(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := &guard.Spec{ID: "fw", Algorithm: guard.FixedWindow, Limit: 3, Window: 10 * time.Second, Enforce: true}
	for _, r := range []guard.OpResult{{Skipped: true, Allowed: true, ResetAfter: 5 * time.Second}, {Inapplicable: true, Allowed: true, ResetAfter: 5 * time.Second}} {
		mem := memstore.New(func() time.Time { return now })
		op := guard.Op{Kind: guard.Take, Spec: spec, Tag: edgeTag, Cost: 1}
		mem.Mirror([]guard.Op{op}, []guard.OpResult{r})
		res, err := mem.Do(context.Background(), []guard.Op{op})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Allowed || res[0].Remaining != 2 {
			t.Errorf("after mirroring %+v: %+v, want a fresh state's answer", r, res[0])
		}
	}
}

// TestASetFullAtOneInstantKeepsTheLastValuesByName: values committed at
// the same instant past what a distinct set keeps are dropped in the order
// Redis's sorted sets hold them (by score, then by name): of a, b and c at
// one instant under a keep of 2, a goes; both stores agree, so a value
// the backstop mirrors is the one Redis still holds.
func TestASetFullAtOneInstantKeepsTheLastValuesByName(t *testing.T) {
	spec := &guard.Spec{ID: "ds", Algorithm: guard.Distinct, Limit: 1, Keep: 2, Window: 10 * time.Second, Enforce: true, Challenge: true}
	bothStores(t, func(t *testing.T, st guard.Store, _ func(time.Time)) {
		ctx := context.Background()
		for _, v := range []string{"b", "c", "a"} {
			if _, err := st.Do(ctx, []guard.Op{{Kind: guard.Commit, Spec: spec, Tag: edgeTag, Cost: 1, Member: v}}); err != nil {
				t.Fatal(err)
			}
		}
		for v, seen := range map[string]bool{"a": false, "b": true, "c": true} {
			res, err := st.Do(ctx, []guard.Op{{Kind: guard.Peek, Spec: spec, Tag: edgeTag, Cost: 1, Member: v}})
			if err != nil {
				t.Fatal(err)
			}
			// a value the set holds needs no room: allowed; a new one, with
			// the set over its limit, is challenged or denied
			if got := res[0].Allowed && !res[0].Challenged; got != seen {
				t.Errorf("%s: %+v, want held %v", v, res[0], seen)
			}
		}
	})
}
