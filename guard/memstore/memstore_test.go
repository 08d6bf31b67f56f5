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

// The backstop and the Redis library must agree: the same operations at
// the same instants give the same results, for every algorithm (packed and
// not), lockouts, refunds, clears, unblocks, releases and reservations.
// The Lua side runs on the embedded Redis, whose clock the test sets.
func TestSameResultsAsTheRedisLibrary(t *testing.T) {
	lockout := &store.Lockout{Initial: 2 * time.Second, Factor: 2, Max: 7 * time.Second, Reset: 30 * time.Second}
	w := 10 * time.Second
	specs := []*store.Spec{
		{ID: "fw", Algorithm: store.FixedWindow, Limit: 4, Window: w, Enforce: true},
		{ID: "tb", Algorithm: store.TokenBucket, Limit: 4, Window: w, Enforce: true},
		{ID: "sw", Algorithm: store.SlidingWindow, Limit: 4, Window: w, Enforce: true},
		{ID: "sl", Algorithm: store.SlidingLog, Limit: 3, Window: w, Enforce: true},
		{ID: "cc", Algorithm: store.Concurrency, Limit: 2, Window: w, Enforce: true},
		{ID: "ds", Algorithm: store.Distinct, Limit: 3, Window: w, Enforce: true},
		{ID: "Fl", Algorithm: store.FixedWindow, Limit: 3, Window: w, Enforce: true, Lockout: lockout},
		{ID: "Sl", Algorithm: store.SlidingLog, Limit: 3, Window: w, Enforce: true, Lockout: lockout},
		// packed, sharing one hash per tag
		{ID: "pf", Algorithm: store.FixedWindow, Limit: 5, Window: w, Enforce: true, Packed: true, PackTTL: 30 * time.Second},
		{ID: "pt", Algorithm: store.TokenBucket, Limit: 3, Window: w, Enforce: true, Packed: true, PackTTL: 30 * time.Second, Lockout: lockout},
		{ID: "ps", Algorithm: store.SlidingWindow, Limit: 4, Window: w, Enforce: false, Packed: true, PackTTL: 30 * time.Second},
		// ratios and elastic limits, on their own keys and packed
		{ID: "rt", Algorithm: store.Ratio, Limit: 60, Min: 3, Window: w, Enforce: true},
		{ID: "pr", Algorithm: store.Ratio, Limit: 50, Min: 2, Window: w, Enforce: true, Packed: true, PackTTL: 30 * time.Second},
		{ID: "el", Algorithm: store.SlidingWindow, Limit: 2, Window: w, Enforce: true, Elastic: 0.5},
		{ID: "pe", Algorithm: store.SlidingWindow, Limit: 2, Window: w, Enforce: true, Packed: true, PackTTL: 30 * time.Second, Elastic: 1.5},
		// challenge rules: their denial takes anyway and denies nothing
		{ID: "ch", Algorithm: store.FixedWindow, Limit: 2, Window: w, Enforce: true, Challenge: true},
		{ID: "cr", Algorithm: store.Ratio, Limit: 50, Min: 2, Window: w, Enforce: true, Challenge: true, Lockout: nil},
	}
	// an account's device tokens: 20s of life
	devices := &store.Spec{ID: "dv", Algorithm: store.Devices, Window: 20 * time.Second}
	tags := []string{"AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"}
	// what the steps covered: a comparison of nothing proves nothing
	counts := map[string]int{}
	defer func() {
		for _, want := range []string{"t ratio false false", "t ratio true false", "t sliding_window true true",
			"r sliding_window true false", "c ratio true false", "r ratio true false", "d devices true false", "d devices false false", "D devices true false",
			"t fixed_window false false challenged", "t ratio false false challenged"} {
			if counts[want] == 0 && !t.Failed() {
				t.Errorf("no step was %q (kind, algorithm, allowed, inapplicable, challenged): the comparison does not cover it", want)
			}
		}
	}()

	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
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

			type taken struct {
				op store.Op
				n  int64
				at time.Time
			}
			var takes []taken
			members := 0
			for step := range 400 {
				if rng.IntN(3) == 0 {
					d := time.Duration(rng.IntN(40)) * 100 * time.Millisecond
					now = now.Add(d)
					srv.SetTime(now)
					srv.FastForward(d)
				}
				var batch []store.Op
				device := rng.IntN(4) == 0
				if device {
					// a device check first: a token issued up to 30s ago
					// (some expired), of an account revoked now and then
					at := now.Add(-time.Duration(rng.IntN(300)) * 100 * time.Millisecond)
					batch = append(batch, store.Op{Kind: store.DeviceCheck, Spec: devices, Tag: tags[rng.IntN(len(tags))], Cost: 1, At: at})
				} else if rng.IntN(15) == 0 {
					batch = append(batch, store.Op{Kind: store.Revoke, Spec: devices, Tag: tags[rng.IntN(len(tags))], Cost: 1})
				}
				for range 1 + rng.IntN(3) {
					s := specs[rng.IntN(len(specs))]
					op := store.Op{Spec: s, Tag: tags[rng.IntN(len(tags))], Cost: 1}
					switch k := rng.IntN(20); {
					case k < 10:
						op.Kind = store.Take
						if s.Algorithm == store.FixedWindow && !s.Packed && s.Lockout == nil && rng.IntN(3) == 0 {
							op.Extra = int64(rng.IntN(4))
						}
						if rng.IntN(5) == 0 && s.Algorithm != store.Distinct {
							op.Cost = 2
						}
					case k < 12:
						op.Kind = store.Peek
					case k < 14:
						op.Kind = store.Strike
					case k < 17 && len(takes) > 0:
						tk := takes[rng.IntN(len(takes))]
						op = tk.op
						op.Kind, op.Cost, op.Extra, op.At, op.Cond = store.Refund, max(tk.n, 1), 0, tk.at, store.Always
						if rng.IntN(2) == 0 {
							op.Kind = store.Cancel
						}
						if op.Spec.Algorithm == store.Concurrency {
							op.Kind = store.Release
						}
						if rng.IntN(3) == 0 {
							op.At = time.Time{}
						}
					case k < 19:
						op.Kind = store.Unblock
					default:
						op.Kind, op.Spec, op.MaxWait = store.Reserve, specs[1], time.Duration(rng.IntN(5))*time.Second
					}
					switch op.Spec.Algorithm {
					case store.Distinct:
						if op.Member == "" {
							op.Member = string(rune('a' + rng.IntN(5)))
						}
					case store.SlidingLog, store.Concurrency:
						if op.Kind == store.Take {
							members++
							op.Member = fmt.Sprint("m", members)
						}
					}
					if op.Kind == store.Strike && op.Spec.Lockout == nil && rng.IntN(2) == 0 {
						op.Kind = store.Take
					}
					if device && (op.Kind == store.Take || op.Kind == store.Peek) {
						op.Cond = store.Cond(rng.IntN(3))
					}
					// one op per rule state in a batch, as the guard makes them
					dup := false
					for _, b := range batch {
						// (a T and a U op of one state: only one of them applies)
						dup = dup || (b.Spec == op.Spec && b.Tag == op.Tag && (b.Cond == op.Cond || b.Cond == store.Always || op.Cond == store.Always))
					}
					if !dup {
						batch = append(batch, op)
					}
				}
				want, err := lua.Do(ctx, batch)
				if err != nil {
					t.Fatalf("step %d: redis: %v", step, err)
				}
				got, err := mem.Do(ctx, batch)
				if err != nil {
					t.Fatalf("step %d: memstore: %v", step, err)
				}
				for i := range batch {
					w, g := want[i], got[i]
					w.Now, g.Now = time.Time{}, time.Time{}
					if w != g {
						t.Fatalf("step %d, op %d (%s %s packed=%v tag %c cost %d extra %d member %q):\n redis    %+v\n memstore %+v",
							step, i, batch[i].Kind, batch[i].Spec.Algorithm, batch[i].Spec.Packed, batch[i].Tag[0], batch[i].Cost,
							batch[i].Extra, batch[i].Member, w, g)
					}
					k := fmt.Sprint(batch[i].Kind, " ", batch[i].Spec.Algorithm, " ", want[i].Allowed, " ", want[i].Inapplicable)
					if want[i].Challenged {
						k += " challenged"
					}
					counts[k]++
					if batch[i].Kind == store.Take && want[i].Taken > 0 {
						takes = append(takes, taken{batch[i], want[i].Taken, want[i].Now})
					}
				}
			}
		})
	}
}

func TestStateIsBounded(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	const max = 1000
	mem := memstore.NewSized(func() time.Time { return now }, max)
	spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 3, Window: time.Hour, Enforce: true}
	ctx := context.Background()
	take := func(tag string, kind store.OpKind) store.OpResult {
		res, err := mem.Do(ctx, []store.Op{{Kind: kind, Spec: spec, Tag: tag, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	for i := range max + 500 {
		take(fmt.Sprint(i), store.Take)
		if i == max+400 {
			take("0", store.Take) // used again: among the most recent
		}
	}
	if n := mem.Len(); n > max {
		t.Fatalf("%d states held, want at most %d", n, max)
	}
	// The least recently used are forgotten (start afresh), the recent kept.
	if r := take("1", store.Peek); r.Remaining != 3 {
		t.Errorf("an early subject was kept: %+v", r)
	}
	if r := take(fmt.Sprint(max+499), store.Peek); r.Remaining != 2 {
		t.Errorf("the last subject was forgotten: %+v", r)
	}
	// ("0" was forgotten once, then taken again near the end: kept)
	if r := take("0", store.Peek); r.Remaining != 2 {
		t.Errorf("a subject used again was forgotten: %+v", r)
	}
}

// TestARevocationNeverMovesBack: the store's clock steps back 2s (a
// failover to a node set behind) between two revocations of an account:
// the second one does not move its revocation time back, and comes at
// least 1µs after the first (a token issued 1µs after it, as a process
// issues one after its own revocation, is revoked by the next), so a
// token issued in between is revoked, in the library and in the backstop
// alike; one issued after both in the earlier clock is trusted.
func TestARevocationNeverMovesBack(t *testing.T) {
	devices := &store.Spec{ID: "dv", Algorithm: store.Devices, Window: 20 * time.Second}
	const tag = "AAAAAAAAAAAAAAAAAAAAAA"
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	srv.SetTime(now)
	ctx := context.Background()
	for name, st := range map[string]store.Store{
		"library":  redisstore.New(srv.Client(), redisstore.Options{}),
		"backstop": memstore.New(func() time.Time { return now }),
	} {
		now = t0
		srv.SetTime(now)
		revoke := func() {
			if _, err := st.Do(ctx, []store.Op{{Kind: store.Revoke, Spec: devices, Tag: tag, Cost: 1}}); err != nil {
				t.Fatal(name, err)
			}
		}
		revoke()
		now = t0.Add(-2 * time.Second)
		srv.SetTime(now)
		revoke()
		for _, c := range []struct {
			at      time.Time
			trusted bool
		}{{t0.Add(-time.Second), false}, {t0, false}, {t0.Add(time.Microsecond), false}, {t0.Add(time.Millisecond), true}} {
			res, err := st.Do(ctx, []store.Op{{Kind: store.DeviceCheck, Spec: devices, Tag: tag, Cost: 1, At: c.at}})
			if err != nil {
				t.Fatal(name, err)
			}
			if res[0].Allowed != c.trusted {
				t.Errorf("%s: a token issued %s after the first revocation: trusted %v, want %v", name, c.at.Sub(t0), res[0].Allowed, c.trusted)
			}
		}
	}
}
