package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// A fixed window's end is the clock's (store.FixedWindowEnd), without
// reading the key's TTL, except where the two may differ: within a second
// of a window's edge (callers passing clocks a little apart, a TTL's
// whole milliseconds) and on a denial. There the key's TTL, the truth,
// is answered: here, keys written as a library before aligned windows
// wrote them (the window from the first hit), or by a caller whose clock
// was apart. In the fast pass (a batch of plain takes) and the general one
// (a peek beside the take).
func TestAFixedWindowAnswersItsKeysTTLNearAnEdgeAndOnADenial(t *testing.T) {
	const hour = time.Hour
	spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 5, Window: hour, Enforce: true}
	other := &store.Spec{ID: "ot", Algorithm: store.FixedWindow, Limit: 5, Window: hour, Enforce: true}
	cases := []struct {
		name      string
		beforeE   time.Duration // now, this long before the clock's end of the window
		count     int64         // the key's count
		ttl       time.Duration // and TTL
		allowed   bool
		reset     time.Duration // the answer's ResetAfter (allowed) or RetryAfter
		remaining int64
	}{
		{"a denial waits for the key's end", 30 * time.Minute, 5, 40 * time.Minute, false, 40 * time.Minute, 0},
		{"just after an edge, the key's end", hour - 300*time.Millisecond, 1, 700 * time.Millisecond, true, 700 * time.Millisecond, 3},
		{"just before an edge, the key's end", 400 * time.Millisecond, 1, 10 * time.Second, true, 10 * time.Second, 3},
		{"mid-window, allowed, the clock's end (no PTTL)", 30 * time.Minute, 1, 40 * time.Minute, true, 30 * time.Minute, 3},
	}
	for _, c := range cases {
		for _, general := range []bool{false, true} {
			name := c.name + " (fast pass)"
			if general {
				name = c.name + " (general pass)"
			}
			t.Run(name, func(t *testing.T) {
				clock, st := newFixedClock(t)
				op := store.Op{Kind: store.Take, Spec: spec, Tag: "Kz9cY0qQ3xWfT1mB7nLp2A", Cost: 1}
				now := clock.now.UnixMicro()
				end := store.FixedWindowEnd(&op, now)
				// to the instant c.beforeE before the window's end, a
				// window later
				clock.advance(time.Duration(end-now)*time.Microsecond + hour - c.beforeE)
				ctx := context.Background()
				if err := clock.srv.Client().Set(ctx, "og:{"+op.Tag+"}"+spec.ID, c.count, c.ttl).Err(); err != nil {
					t.Fatal(err)
				}
				batch := []store.Op{op}
				if general {
					batch = append(batch, store.Op{Kind: store.Peek, Spec: other, Tag: op.Tag, Cost: 1})
				}
				res, err := st.Do(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				r := res[0]
				got := r.ResetAfter
				if !c.allowed {
					got = r.RetryAfter
				}
				if r.Allowed != c.allowed || got != c.reset || r.Remaining != c.remaining {
					t.Fatalf("%+v; want allowed %v, %d left, ending in %s", r, c.allowed, c.remaining, c.reset)
				}
			})
		}
	}
}

// A key's TTL is set in whole milliseconds, so it may outlive the
// clock's edge of its window by less than one: a take then finds it
// with a PTTL of 0. Its window is over (as a read has it): the take
// starts the next, its count not carried over (before, the key was
// given a whole new window with the old count). In the fast pass and
// the general one.
func TestAKeyInItsLastMillisecondAfterTheEdgeStartsTheNextWindow(t *testing.T) {
	spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 5, Window: time.Hour, Enforce: true}
	other := &store.Spec{ID: "ot", Algorithm: store.FixedWindow, Limit: 5, Window: time.Hour, Enforce: true}
	for _, general := range []bool{false, true} {
		clock, st := newFixedClock(t)
		op := store.Op{Kind: store.Take, Spec: spec, Tag: "Kz9cY0qQ3xWfT1mB7nLp2A", Cost: 1}
		now := clock.now.UnixMicro()
		end := store.FixedWindowEnd(&op, now)
		batch := []store.Op{op}
		if general {
			batch = append(batch, store.Op{Kind: store.Peek, Spec: other, Tag: op.Tag, Cost: 1})
		}
		ctx := context.Background()
		// two takes half a millisecond before the edge: the key's TTL is
		// one whole millisecond
		clock.advance(time.Duration(end-now)*time.Microsecond - 500*time.Microsecond)
		for range 2 {
			if _, err := st.Do(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		// 0.2 ms after the edge, the key still there for 0.3 ms
		clock.advance(700 * time.Microsecond)
		res, err := st.Do(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if r := res[0]; !r.Allowed || r.Remaining != 4 || r.ResetAfter != time.Hour-200*time.Microsecond {
			t.Fatalf("general pass %v: %+v; want the next window's first take, 4 left, ending in 59m59.9998s", general, r)
		}
	}
}
