package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// A fixed window's key in its last millisecond (Redis drops a key once
// the time is past its expiry's millisecond; PTTL answers 0 in it) is a
// window over where the window's end is read from PTTL: a take then
// starts the next, as a read has it. Taken for a key without a TTL, it
// was given a whole new window with the old count, and a client that
// waited its retry-after to the millisecond was denied for another
// window. Where the end is in the key's value (an hour's window of a
// small limit, see endInValue), the same: the denial reads the key's
// PTTL, and 0 is a window over (read from the value, it was denied for
// the 0.3 ms left). In the fast pass (plain takes alone) and the general
// one (a peek beside the take).
func TestATakeInAKeysLastMillisecondStartsTheNextWindow(t *testing.T) {
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"end in the value", time.Hour}, {"end from PTTL", 2 * 365 * 24 * time.Hour}} {
		spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 2, Window: c.window, Enforce: true}
		other := &store.Spec{ID: "ot", Algorithm: store.FixedWindow, Limit: 2, Window: c.window, Enforce: true}
		for _, general := range []bool{false, true} {
			clock, st := newFixedClock(t)
			batch := []store.Op{{Kind: store.Take, Spec: spec, Tag: "Kz9cY0qQ3xWfT1mB7nLp2A", Cost: 1}}
			if general {
				batch = append(batch, store.Op{Kind: store.Peek, Spec: other, Tag: "Kz9cY0qQ3xWfT1mB7nLp2A", Cost: 1})
			}
			ctx := context.Background()
			for range 2 { // the window's limit
				if res, err := st.Do(ctx, batch); err != nil || !res[0].Allowed {
					t.Fatalf("%s: a take within the limit: %+v %v", c.name, res, err)
				}
			}
			denied, err := st.Do(ctx, batch)
			if err != nil || denied[0].Allowed || denied[0].RetryAfter != c.window {
				t.Fatalf("%s: over the limit: %+v %v; want denied for the window", c.name, denied, err)
			}
			// 0.3 ms before the key's end: its PTTL is 0
			clock.advance(c.window - 300*time.Microsecond)
			key := ownKey(t, clock.srv.Client(), batch[0].Tag, "fw")
			if p := clock.srv.Client().PTTL(ctx, key).Val(); p != 0 {
				t.Fatalf("%s: the key's PTTL is %s, want 0 (the test's premise)", c.name, p)
			}
			res, err := st.Do(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			if r := res[0]; !r.Allowed || r.Remaining != 1 || r.ResetAfter != c.window {
				t.Fatalf("%s, general pass %v: %+v; want the next window's first take: 1 left, for the window", c.name, general, r)
			}
		}
	}
}

// Such a take, given back because another rule of its batch denies,
// leaves nothing: the window it started is gone with it, as a denied
// request consumes nothing.
func TestATakeInAKeysLastMillisecondGivenBackLeavesNothing(t *testing.T) {
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"end in the value", time.Hour}, {"end from PTTL", 2 * 365 * 24 * time.Hour}} {
		spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 2, Window: c.window, Enforce: true}
		blocker := &store.Spec{ID: "bl", Algorithm: store.FixedWindow, Limit: 1, Window: 2 * c.window, Enforce: true}
		other := &store.Spec{ID: "ot", Algorithm: store.FixedWindow, Limit: 2, Window: c.window, Enforce: true}
		const tag = "Kz9cY0qQ3xWfT1mB7nLp2A"
		for _, general := range []bool{false, true} {
			clock, st := newFixedClock(t)
			ctx := context.Background()
			take := func(s *store.Spec) store.Op { return store.Op{Kind: store.Take, Spec: s, Tag: tag, Cost: 1} }
			for _, s := range []*store.Spec{spec, spec, blocker} { // both at their limits
				if res, err := st.Do(ctx, []store.Op{take(s)}); err != nil || !res[0].Allowed {
					t.Fatalf("a take within the limit: %+v %v", res, err)
				}
			}
			key := ownKey(t, clock.srv.Client(), tag, "fw")
			clock.advance(c.window - 300*time.Microsecond) // fw's key: PTTL 0
			batch := []store.Op{take(spec), take(blocker)}
			if general {
				batch = append(batch, store.Op{Kind: store.Peek, Spec: other, Tag: tag, Cost: 1})
			}
			res, err := st.Do(ctx, batch)
			if err != nil || res[0].Allowed != true || res[1].Allowed {
				t.Fatalf("%s, general pass %v: %+v %v; want fw allowing, the blocker denying", c.name, general, res, err)
			}
			if n := clock.srv.Client().Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("%s, general pass %v: the given-back take left fw's key (%q)", c.name, general, clock.srv.Client().Get(ctx, key).Val())
			}
		}
	}
}
