package memstore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/localredis"
)

const edgeTag = "AAAAAAAAAAAAAAAAAAAAAA"

// bothStores runs f with the Lua library (on the embedded Redis) and
// memstore, on one clock that set moves.
func bothStores(t *testing.T, f func(t *testing.T, st store.Store, set func(time.Time))) {
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
	bothStores(t, func(t *testing.T, st store.Store, _ func(time.Time)) {
		for _, spec := range []*store.Spec{
			{ID: "sw", Algorithm: store.SlidingWindow, Limit: 2, Window: w, Enforce: true},
			{ID: "sl", Algorithm: store.SlidingLog, Limit: 2, Window: w, Enforce: true},
			{ID: "fw", Algorithm: store.FixedWindow, Limit: 2, Window: w, Enforce: true},
		} {
			res, err := st.Do(context.Background(), []store.Op{{Kind: store.Take, Spec: spec, Tag: edgeTag, Cost: 3, Member: "m1"}})
			if err != nil {
				t.Fatal(err)
			}
			r := res[0]
			if r.Allowed || r.Taken != 0 || r.Remaining != 2 || r.RetryAfter < w {
				t.Errorf("%s: a take of 3 under a limit of 2: %+v", spec.Algorithm, r)
			}
			if spec.Algorithm == store.SlidingWindow && (r.ResetAfter != 0 || r.RetryAfter < 2*w) {
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
	spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 3, Window: 10 * time.Second, Enforce: true}
	for _, r := range []store.OpResult{{Skipped: true, Allowed: true, ResetAfter: 5 * time.Second}, {Inapplicable: true, Allowed: true, ResetAfter: 5 * time.Second}} {
		mem := memstore.New(func() time.Time { return now })
		op := store.Op{Kind: store.Take, Spec: spec, Tag: edgeTag, Cost: 1}
		mem.Mirror([]store.Op{op}, []store.OpResult{r})
		res, err := mem.Do(context.Background(), []store.Op{op})
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
	spec := &store.Spec{ID: "ds", Algorithm: store.Distinct, Limit: 1, Keep: 2, Window: 10 * time.Second, Enforce: true, Challenge: true}
	bothStores(t, func(t *testing.T, st store.Store, _ func(time.Time)) {
		ctx := context.Background()
		for _, v := range []string{"b", "c", "a"} {
			if _, err := st.Do(ctx, []store.Op{{Kind: store.Commit, Spec: spec, Tag: edgeTag, Cost: 1, Member: v}}); err != nil {
				t.Fatal(err)
			}
		}
		for v, seen := range map[string]bool{"a": false, "b": true, "c": true} {
			res, err := st.Do(ctx, []store.Op{{Kind: store.Peek, Spec: spec, Tag: edgeTag, Cost: 1, Member: v}})
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

// TestAMirroredRatioDenialCountsTheTakesInFlight: a ratio's denial is
// mirrored as a window of failures at the rule's minimum, plus this
// process's takes still in flight: with one take begun and not answered,
// the backstop denies the next attempt as the store did (counted without
// the take in flight, it would hold too few attempts for the ratio to
// apply, and admit).
func TestAMirroredRatioDenialCountsTheTakesInFlight(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := &store.Spec{ID: "rt", Algorithm: store.Ratio, Limit: 50, Min: 3, Window: 10 * time.Second, Enforce: true, Failures: true}
	mem := memstore.New(func() time.Time { return now })
	op := store.Op{Kind: store.Take, Spec: spec, Tag: edgeTag, Cost: 1}
	mem.Begin([]store.Op{op})
	mem.Begin([]store.Op{op})
	mem.Mirror([]store.Op{op}, []store.OpResult{{Allowed: false, RetryAfter: 5 * time.Second, ResetAfter: 10 * time.Second}})
	res, err := mem.Do(context.Background(), []store.Op{op})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Allowed {
		t.Errorf("after a mirrored denial, with a take in flight: %+v, want denied", res[0])
	}
}

// TestCommittingAValueTheSetHoldsTakesNothing: a proof that commits a
// distinct value the set already holds takes no unit (a new value takes
// one); both stores agree.
func TestCommittingAValueTheSetHoldsTakesNothing(t *testing.T) {
	spec := &store.Spec{ID: "dc", Algorithm: store.Distinct, Limit: 3, Window: 10 * time.Second, Enforce: true, Challenge: true}
	bothStores(t, func(t *testing.T, st store.Store, _ func(time.Time)) {
		ctx := context.Background()
		for i, want := range []int64{1, 0} {
			res, err := st.Do(ctx, []store.Op{{Kind: store.Commit, Spec: spec, Tag: edgeTag, Cost: 1, Member: "v"}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Taken != want || res[0].Remaining != 2 {
				t.Errorf("commit %d of one value: %+v, want taken %d, 2 left", i+1, res[0], want)
			}
		}
	})
}

// TestARatiosWaitsAgreeWithTheLibrary: a walk on ratio rules alone
// (takes that fail or are given back, across window edges), so that its
// denials meet a previous window of every failure ratio: memstore and the
// Lua library answer every step alike (allowed, remaining, retry after).
func TestARatiosWaitsAgreeWithTheLibrary(t *testing.T) {
	specs := []*store.Spec{
		{ID: "r6", Algorithm: store.Ratio, Limit: 60, Min: 2, Window: 12800 * time.Millisecond, Enforce: true, Failures: true},
		{ID: "r3", Algorithm: store.Ratio, Limit: 30, Min: 3, Window: 12800 * time.Millisecond, Enforce: true, Failures: true},
	}
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	srv.SetTime(now)
	lua := redisstore.New(srv.Client(), redisstore.Options{})
	mem := memstore.New(func() time.Time { return now })
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	type take struct {
		op store.Op
		at time.Time
	}
	var taken []take
	denials := 0
	for step := range 3000 {
		if rng.IntN(3) == 0 {
			d := time.Duration(1+rng.IntN(40)) * 100 * time.Millisecond
			now = now.Add(d)
			srv.SetTime(now)
			srv.FastForward(d)
		}
		spec := specs[rng.IntN(len(specs))]
		op := store.Op{Kind: store.Take, Spec: spec, Tag: edgeTag, Cost: 1}
		if len(taken) > 0 && rng.IntN(3) == 0 {
			k := rng.IntN(len(taken))
			op = taken[k].op
			op.Kind, op.At = store.Refund, taken[k].at
			taken = append(taken[:k], taken[k+1:]...)
		}
		want, err := lua.Do(ctx, []store.Op{op})
		if err != nil {
			t.Fatal(err)
		}
		got, err := mem.Do(ctx, []store.Op{op})
		if err != nil {
			t.Fatal(err)
		}
		w, g := want[0], got[0]
		if w.Allowed != g.Allowed || w.Remaining != g.Remaining || w.RetryAfter != g.RetryAfter || w.Taken != g.Taken {
			t.Fatalf("step %d, %s %s: lua %+v, memstore %+v", step, op.Kind, spec.ID, w, g)
		}
		if op.Kind == store.Take && w.Taken > 0 {
			taken = append(taken, take{op, now})
		}
		if op.Kind == store.Take && !w.Allowed {
			denials++
		}
	}
	if denials < 100 {
		t.Errorf("%d denials in the walk: it does not reach the waits", denials)
	}
}

// TestALockoutsHistoryEndsAtItsReset: the strikes a lockout remembers end
// exactly reset after the last lockout began, to the microsecond. A
// failure at that instant is a first failure again (locked only at the
// limit, for the first duration), and the lockouts after it count from
// one. Both stores agree; the counts taken meanwhile keep the state alive
// past the reset, so the instant is not an empty state's.
func TestALockoutsHistoryEndsAtItsReset(t *testing.T) {
	lockout := &store.Lockout{Initial: 2 * time.Second, Factor: 2, Max: 16 * time.Second, Reset: 30 * time.Second}
	spec := &store.Spec{ID: "lk", Algorithm: store.SlidingLog, Limit: 3, Window: 10 * time.Second, Enforce: true, Lockout: lockout}
	bothStores(t, func(t *testing.T, st store.Store, set func(time.Time)) {
		do := stepper(t, st, set, spec, true)
		takes := func(at time.Duration, n int) {
			t.Helper()
			for i := range n {
				if r := do(at+time.Duration(i)*time.Microsecond, store.Take); !r.Allowed {
					t.Fatalf("take %d at %s: %+v", i, at, r)
				}
			}
		}
		takes(0, 3)
		if r := do(time.Millisecond, store.Strike); !r.Locked || r.RetryAfter != 2*time.Second {
			t.Fatalf("a failure at the limit: %+v, want locked for 2s", r)
		}
		// a take within the window that outlives the reset
		reset := time.Millisecond + 30*time.Second
		takes(25*time.Second, 1)
		if r := do(reset, store.Strike); r.Locked || !r.Allowed {
			t.Errorf("a failure under the limit as the history ends: %+v, want not locked (a first failure)", r)
		}
		takes(reset+time.Microsecond, 1)
		// the limit reached again, a failure at the next instant locks for
		// the first duration; the one after that, within reset, for twice it
		at := reset + time.Second
		takes(at-2*time.Microsecond, 1)
		if r := do(at, store.Strike); !r.Locked || r.RetryAfter != 2*time.Second {
			t.Errorf("a failure at the limit after the history ended: %+v, want locked for 2s (the first)", r)
		}
		if r := do(at+3*time.Second, store.Strike); !r.Locked || r.RetryAfter != 4*time.Second {
			t.Errorf("the next failure, within reset: %+v, want locked for 4s (the second)", r)
		}
	})
	// the same instant at the limit: the failure locks for the first
	// duration, not the second, and the one after it for the second
	other := *spec
	other.ID = "lk-limit"
	bothStores(t, func(t *testing.T, st store.Store, set func(time.Time)) {
		do := stepper(t, st, set, &other, true)
		for i := range 3 {
			do(time.Duration(i)*time.Microsecond, store.Take)
		}
		if r := do(time.Millisecond, store.Strike); !r.Locked || r.RetryAfter != 2*time.Second {
			t.Fatalf("a failure at the limit: %+v, want locked for 2s", r)
		}
		reset := time.Millisecond + 30*time.Second
		for i := range 3 {
			if r := do(25*time.Second+time.Duration(i)*time.Microsecond, store.Take); !r.Allowed {
				t.Fatalf("take %d at 25s: %+v", i, r)
			}
		}
		if r := do(reset, store.Strike); !r.Locked || r.RetryAfter != 2*time.Second {
			t.Errorf("a failure at the limit as the history ends: %+v, want locked for 2s (the first)", r)
		}
		if r := do(reset+3*time.Second, store.Strike); !r.Locked || r.RetryAfter != 4*time.Second {
			t.Errorf("the next failure, within reset: %+v, want locked for 4s (the second)", r)
		}
	})
}

// TestAFixedWindowKeptAliveByALockoutStartsAgainAtItsEnd: a fixed window's
// state outlives the window when a lockout's history keeps it; a take at
// the window's last instant counts in a new window, in both stores.
func TestAFixedWindowKeptAliveByALockoutStartsAgainAtItsEnd(t *testing.T) {
	lockout := &store.Lockout{Initial: 2 * time.Second, Factor: 2, Max: 16 * time.Second, Reset: time.Minute}
	spec := &store.Spec{ID: "fwl", Algorithm: store.FixedWindow, Limit: 3, Window: 10 * time.Second, Enforce: true, Lockout: lockout}
	bothStores(t, func(t *testing.T, st store.Store, set func(time.Time)) {
		do := stepper(t, st, set, spec, false)
		for range 3 {
			do(0, store.Take)
		}
		if r := do(time.Second, store.Strike); !r.Locked {
			t.Fatalf("a failure at the limit: %+v, want locked", r)
		}
		// a window begun after the lockout (which cleared the count) ends
		// at 13s; the lockout's history lasts a minute
		if r := do(3*time.Second, store.Take); !r.Allowed || r.Remaining != 2 {
			t.Fatalf("a take after the lockout: %+v, want allowed, 2 remaining", r)
		}
		if r := do(13*time.Second, store.Take); !r.Allowed || r.Remaining != 2 {
			t.Errorf("a take as the window ends: %+v, want allowed, 2 remaining (a new window)", r)
		}
		if r := do(13*time.Second, store.Take); !r.Allowed || r.Remaining != 1 {
			t.Errorf("the next take: %+v, want allowed, 1 remaining", r)
		}
	})
}

// TestAnElasticLimitCountsThePreviousWindowsVerifiedUnitsByWeight: an
// elastic rule's limit grows with the verified units (successes) of the
// sliding window: the current window's in full, the previous window's
// weighted by the share of it the sliding window still covers; in both
// stores.
func TestAnElasticLimitCountsThePreviousWindowsVerifiedUnitsByWeight(t *testing.T) {
	spec := &store.Spec{ID: "el", Algorithm: store.SlidingWindow, Limit: 2, Window: 10 * time.Second, Enforce: true, Elastic: 3}
	bothStores(t, func(t *testing.T, st store.Store, set func(time.Time)) {
		do := stepper(t, st, set, spec, false) // from a window's start
		// four successes in the first window: each take given back as
		// verified
		for i := range 4 {
			at := time.Duration(i) * time.Second
			if r := do(at, store.Take); !r.Allowed {
				t.Fatalf("take %d: %+v", i, r)
			}
			do(at, store.Refund)
		}
		// half-way through the next window: 4 × 1/2 verified units, a
		// limit of max(2, 3 × 2) = 6, all of it left (a peek tells the
		// room; the takes were given back)
		if r := do(15*time.Second, store.Peek); !r.Allowed || r.Remaining != 6 {
			t.Errorf("half-way through the next window: %+v, want allowed, 6 remaining (a limit of 6)", r)
		}
		// three quarters through: 4 × 1/4, a limit of max(2, 3) = 3
		if r := do(17500*time.Millisecond, store.Peek); !r.Allowed || r.Remaining != 3 {
			t.Errorf("three quarters through: %+v, want allowed, 3 remaining (a limit of 3)", r)
		}
	})
}

// stepper returns do: the op of kind, of one unit, on spec's state for
// edgeTag, at at after the walks' t0 (named for its instant when members
// is set, for the log algorithms).
func stepper(t *testing.T, st store.Store, set func(time.Time), spec *store.Spec, members bool) func(at time.Duration, kind store.OpKind) store.OpResult {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	return func(at time.Duration, kind store.OpKind) store.OpResult {
		t.Helper()
		set(t0.Add(at))
		op := store.Op{Kind: kind, Spec: spec, Tag: edgeTag, Cost: 1}
		if members {
			op.Member = "m" + at.String()
		}
		res, err := st.Do(context.Background(), []store.Op{op})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
}
