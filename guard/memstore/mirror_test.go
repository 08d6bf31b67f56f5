package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/localredis"
)

// TestAMirroredBackstopAnswersAsTheStore: the backstop told every answer
// of the store (Mirror) answers the next request as the store would:
// allowed or not, how many remain, a lockout. Takes begun and not yet
// answered (Begin) count as taken until they end (End) or are answered.
// (Ratios and elastic limits are not told their counts: not compared.
// Distinct is left out: its mirror can hold one entry too few, see the
// note in docs/testing.md.)
func TestAMirroredBackstopAnswersAsTheStore(t *testing.T) {
	lockout := &store.Lockout{Initial: 2 * time.Second, Factor: 2, Max: 8 * time.Second, Reset: time.Minute}
	w := 10 * time.Second
	specs := []*store.Spec{
		{ID: "fw", Algorithm: store.FixedWindow, Limit: 3, Window: w, Enforce: true},
		{ID: "tb", Algorithm: store.TokenBucket, Limit: 4, Window: w, Enforce: true},
		{ID: "sw", Algorithm: store.SlidingWindow, Limit: 3, Window: w, Enforce: true},
		{ID: "sl", Algorithm: store.SlidingLog, Limit: 3, Window: w, Enforce: true},
		{ID: "cc", Algorithm: store.Concurrency, Limit: 2, Window: w, Enforce: true},
		{ID: "Fl", Algorithm: store.FixedWindow, Limit: 2, Window: w, Enforce: true, Lockout: lockout},
	}
	for _, spec := range specs {
		t.Run(string(spec.Algorithm)+" "+spec.ID, func(t *testing.T) {
			srv, err := localredis.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			srv.SetTime(now)
			lua := redisstore.New(srv.Client(), redisstore.Options{})
			mem := memstore.New(func() time.Time { return now })
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(7, uint64(len(spec.ID))))
			const tag = "AAAAAAAAAAAAAAAAAAAAAA"
			peek := func() store.Op {
				return store.Op{Kind: store.Peek, Spec: spec, Tag: tag, Cost: 1, Member: "z"}
			}
			for step := range 120 {
				if rng.IntN(3) == 0 {
					d := time.Duration(rng.IntN(30)) * 100 * time.Millisecond
					now = now.Add(d)
					srv.SetTime(now)
					srv.FastForward(d)
					// the time gone by ends in the backstop what it ends in
					// the store: a fixed window, a concurrency slot's hold (a
					// bucket's mirror drops the fraction of a unit, the
					// others' stand for their counts at the mirror's
					// instant: not compared)
					switch spec.Algorithm {
					case store.FixedWindow, store.Concurrency:
						l, _ := lua.Do(ctx, []store.Op{peek()})
						b, _ := mem.Do(ctx, []store.Op{peek()})
						if l[0].Allowed != b[0].Allowed || l[0].Remaining != b[0].Remaining || l[0].Locked != b[0].Locked {
							t.Fatalf("step %d, %s later:\n store    %+v\n backstop %+v", step, d, l[0], b[0])
						}
					}
				}
				op := store.Op{Kind: store.Take, Spec: spec, Tag: tag, Cost: 1, Member: fmt.Sprint("m", step)}
				if spec.Algorithm == store.Distinct {
					op.Member = fmt.Sprint("v", rng.IntN(4))
				}
				if spec.Lockout != nil && rng.IntN(3) == 0 {
					op.Kind = store.Strike
				}
				batch := []store.Op{op}
				// the take in flight counts in the backstop until answered
				mem.Begin(batch)
				if op.Kind == store.Take {
					b, _ := mem.Do(ctx, []store.Op{peek()})
					l, _ := lua.Do(ctx, []store.Op{peek()})
					if l[0].Allowed && b[0].Remaining > l[0].Remaining-1 && spec.Algorithm != store.Distinct {
						t.Fatalf("step %d: a take in flight is not counted: backstop %+v, store %+v", step, b[0], l[0])
					}
				}
				// now and then another process takes at the same instant:
				// the store counts a unit this backstop never saw
				if rng.IntN(4) == 0 {
					unseen := []store.Op{{Kind: store.Take, Spec: spec, Tag: tag, Cost: 1, Member: fmt.Sprint("u", step)}}
					if _, err := lua.Do(ctx, unseen); err != nil {
						t.Fatal(err)
					}
				}
				res, err := lua.Do(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				mem.Mirror(batch, res)
				l, _ := lua.Do(ctx, []store.Op{peek()})
				b, _ := mem.Do(ctx, []store.Op{peek()})
				if l[0].Allowed != b[0].Allowed || l[0].Remaining != b[0].Remaining || l[0].Locked != b[0].Locked {
					t.Fatalf("step %d after %s (%+v):\n store    %+v\n backstop %+v", step, op.Kind, res[0], l[0], b[0])
				}
				// another take begun and ended (its call failed) changes nothing
				other := []store.Op{{Kind: store.Take, Spec: spec, Tag: tag, Cost: 1, Member: fmt.Sprint("x", step)}}
				mem.Begin(other)
				mem.End(other)
				if a, _ := mem.Do(ctx, []store.Op{peek()}); a[0].Remaining != b[0].Remaining || a[0].Allowed != b[0].Allowed {
					t.Fatalf("step %d: Begin then End left %+v, was %+v", step, a[0], b[0])
				}
			}
		})
	}
}

// TestALeaseTakesAQuarterOfWhatIsLeftAtMost: a take that asks for extra
// units (a lease) gets them from what the limit leaves, at most a
// quarter of it, in both stores.
func TestALeaseTakesAQuarterOfWhatIsLeftAtMost(t *testing.T) {
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	srv.SetTime(now)
	spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 100, Window: time.Hour, Enforce: true}
	for name, st := range map[string]store.Store{"lua": redisstore.New(srv.Client(), redisstore.Options{}), "memstore": memstore.New(func() time.Time { return now })} {
		for i, c := range []struct{ extra, taken, remaining int64 }{
			{10, 11, 89}, // 99 left after the unit: a quarter is 24, 10 asked
			{40, 23, 66}, // 88 left: a quarter, 22
			{0, 1, 65},
		} {
			res, err := st.Do(context.Background(), []store.Op{{Kind: store.Take, Spec: spec, Tag: "L" + name, Cost: 1, Extra: c.extra}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Taken != c.taken || res[0].Remaining != c.remaining {
				t.Errorf("%s, take %d (extra %d): taken %d, remaining %d; want %d, %d", name, i+1, c.extra, res[0].Taken, res[0].Remaining, c.taken, c.remaining)
			}
		}
	}
}

// pair is the store (the library on an embedded Redis) and a backstop on
// one clock: at sets both to d after t0.
type pair struct {
	lua *redisstore.Store
	mem *memstore.Store
	at  func(d time.Duration)
}

const pairTag = "AAAAAAAAAAAAAAAAAAAAAA"

func newPair(t *testing.T) pair {
	t.Helper()
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	srv.SetTime(now)
	return pair{
		lua: redisstore.New(srv.Client(), redisstore.Options{}),
		mem: memstore.New(func() time.Time { return now }),
		at: func(d time.Duration) {
			srv.FastForward(t0.Add(d).Sub(now))
			now = t0.Add(d)
			srv.SetTime(now)
		},
	}
}

// TestAMirroredEntryEndsWhenItEndsInTheStore: a sliding log's entries and
// a concurrency rule's holds, told to the backstop, end in it when they
// end in the store: a log entry a window after it was taken (not after
// the mirror that last told it), a hold at its own expiry even when
// another process's hold, taken at the same instant as this one's next,
// is counted beside it.
func TestAMirroredEntryEndsWhenItEndsInTheStore(t *testing.T) {
	w := 10 * time.Second
	for _, spec := range []*store.Spec{
		{ID: "sl", Algorithm: store.SlidingLog, Limit: 3, Window: w, Enforce: true},
		{ID: "cc", Algorithm: store.Concurrency, Limit: 2, Window: w, Enforce: true},
	} {
		t.Run(string(spec.Algorithm), func(t *testing.T) {
			p := newPair(t)
			lua, mem, at, tag := p.lua, p.mem, p.at, pairTag
			ctx := context.Background()
			take := func(member string, mirror bool) {
				t.Helper()
				batch := []store.Op{{Kind: store.Take, Spec: spec, Tag: tag, Cost: 1, Member: member}}
				res, err := lua.Do(ctx, batch)
				if err != nil {
					t.Fatal(err)
				}
				if mirror {
					mem.Mirror(batch, res)
				}
			}
			same := func(when string) {
				t.Helper()
				peek := []store.Op{{Kind: store.Peek, Spec: spec, Tag: tag, Cost: 1, Member: "z"}}
				l, _ := lua.Do(ctx, peek)
				b, _ := mem.Do(ctx, peek)
				if l[0].Allowed != b[0].Allowed || l[0].Remaining != b[0].Remaining {
					t.Errorf("%s:\n store    %+v\n backstop %+v", when, l[0], b[0])
				}
			}
			take("a", true)
			at(5 * time.Second)
			take("b", true)
			same("after the second take")
			at(w + time.Millisecond)
			same("the first take's window (or hold) over")
			// another process holds a slot, taken with this one's next
			take("u", false)
			take("c", true)
			same("a take beside another process's")
			at(w + 5*time.Second + time.Millisecond)
			same("the second take's window (or hold) over")
		})
	}
}

// TestAValueSeenAgainIsRefreshedInTheMirror: a distinct rule's value seen
// again takes nothing and starts its window again in the store; the
// backstop told of it does the same, so it still counts the value when
// its first sighting's window has ended.
func TestAValueSeenAgainIsRefreshedInTheMirror(t *testing.T) {
	w := 10 * time.Second
	spec := &store.Spec{ID: "ds", Algorithm: store.Distinct, Limit: 3, Window: w, Enforce: true}
	p := newPair(t)
	lua, mem, at, tag := p.lua, p.mem, p.at, pairTag
	ctx := context.Background()
	take := func(value string) {
		t.Helper()
		batch := []store.Op{{Kind: store.Take, Spec: spec, Tag: tag, Cost: 1, Member: value}}
		res, err := lua.Do(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		mem.Mirror(batch, res)
	}
	take("v")
	at(8 * time.Second)
	take("v") // seen again: nothing taken, its window starts again
	take("w")
	at(w + time.Second)
	peek := []store.Op{{Kind: store.Peek, Spec: spec, Tag: tag, Cost: 1, Member: "x"}}
	l, _ := lua.Do(ctx, peek)
	b, _ := mem.Do(ctx, peek)
	if l[0].Remaining != 1 || b[0].Remaining != l[0].Remaining {
		t.Errorf("the first sighting's window over: store %d remaining (want 1), backstop %d", l[0].Remaining, b[0].Remaining)
	}
}

// TestAMirroredLockoutKeepsItsHistory: a lockout struck through another
// process, told to the backstop by a take it refused, carries its
// history: a failure after it ends and within its reset locks again at
// once, for the next duration,
// in the backstop as in the store (an attacker meeting an outage after a
// lockout gets no fresh budget).
func TestAMirroredLockoutKeepsItsHistory(t *testing.T) {
	lockout := &store.Lockout{Initial: 2 * time.Second, Factor: 2, Max: 16 * time.Second, Reset: 30 * time.Second}
	spec := &store.Spec{ID: "lk", Algorithm: store.FixedWindow, Limit: 3, Window: time.Minute, Enforce: true, Lockout: lockout}
	p := newPair(t)
	lua, mem, at := p.lua, p.mem, p.at
	ctx := context.Background()
	op := func(kind store.OpKind) []store.Op {
		return []store.Op{{Kind: kind, Spec: spec, Tag: pairTag, Cost: 1}}
	}
	// another process's takes and failure, never told
	for range 3 {
		if _, err := lua.Do(ctx, op(store.Take)); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := lua.Do(ctx, op(store.Strike)); err != nil || !res[0].Locked {
		t.Fatalf("a failure at the limit: %+v, %v, want locked", res, err)
	}
	// this process's take, refused by the lockout: told
	at(time.Second)
	take := op(store.Take)
	res, err := lua.Do(ctx, take)
	if err != nil || !res[0].Locked {
		t.Fatalf("a take while locked: %+v, %v, want locked", res, err)
	}
	mem.Mirror(take, res)
	// the lockout over, within its reset: the next failure
	at(3 * time.Second)
	l, err := lua.Do(ctx, op(store.Strike))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := mem.Do(ctx, op(store.Strike))
	if !l[0].Locked || l[0].RetryAfter != 4*time.Second {
		t.Fatalf("the store: %+v, want locked for 4s", l[0])
	}
	if b[0].Locked != l[0].Locked || b[0].RetryAfter != l[0].RetryAfter {
		t.Errorf("the next failure after a mirrored lockout:\n store    %+v\n backstop %+v", l[0], b[0])
	}
}
