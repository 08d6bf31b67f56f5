package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/localredis"
)

// The backstop and the Redis library must agree: the same operations at
// the same instants give the same results, for every algorithm (packed and
// not), lockouts, refunds, clears, unblocks, releases and reservations.
// The Lua side runs on the embedded Redis, whose clock the test sets.
func TestSameResultsAsTheRedisLibrary(t *testing.T) {
	lockout := &guard.Lockout{Initial: 2 * time.Second, Factor: 2, Max: 7 * time.Second, Reset: 30 * time.Second}
	w := 10 * time.Second
	specs := []*guard.Spec{
		{ID: "fw", Algorithm: guard.FixedWindow, Limit: 4, Window: w, Enforce: true},
		{ID: "tb", Algorithm: guard.TokenBucket, Limit: 4, Window: w, Enforce: true},
		{ID: "sw", Algorithm: guard.SlidingWindow, Limit: 4, Window: w, Enforce: true},
		{ID: "sl", Algorithm: guard.SlidingLog, Limit: 3, Window: w, Enforce: true},
		{ID: "cc", Algorithm: guard.Concurrency, Limit: 2, Window: w, Enforce: true},
		{ID: "ds", Algorithm: guard.Distinct, Limit: 3, Window: w, Enforce: true},
		{ID: "Fl", Algorithm: guard.FixedWindow, Limit: 3, Window: w, Enforce: true, Lockout: lockout},
		{ID: "Sl", Algorithm: guard.SlidingLog, Limit: 3, Window: w, Enforce: true, Lockout: lockout},
		// packed, sharing one hash per tag
		{ID: "pf", Algorithm: guard.FixedWindow, Limit: 5, Window: w, Enforce: true, Packed: true, PackTTL: 30 * time.Second},
		{ID: "pt", Algorithm: guard.TokenBucket, Limit: 3, Window: w, Enforce: true, Packed: true, PackTTL: 30 * time.Second, Lockout: lockout},
		{ID: "ps", Algorithm: guard.SlidingWindow, Limit: 4, Window: w, Enforce: false, Packed: true, PackTTL: 30 * time.Second},
		// ratios and elastic limits, on their own keys and packed
		{ID: "rt", Algorithm: guard.Ratio, Limit: 60, Min: 3, Window: w, Enforce: true},
		{ID: "pr", Algorithm: guard.Ratio, Limit: 50, Min: 2, Window: w, Enforce: true, Packed: true, PackTTL: 30 * time.Second},
		{ID: "el", Algorithm: guard.SlidingWindow, Limit: 2, Window: w, Enforce: true, Elastic: 0.5},
		{ID: "pe", Algorithm: guard.SlidingWindow, Limit: 2, Window: w, Enforce: true, Packed: true, PackTTL: 30 * time.Second, Elastic: 1.5},
		// challenge rules: their denial takes anyway and denies nothing
		{ID: "ch", Algorithm: guard.FixedWindow, Limit: 2, Window: w, Enforce: true, Challenge: true},
		{ID: "cr", Algorithm: guard.Ratio, Limit: 50, Min: 2, Window: w, Enforce: true, Challenge: true, Lockout: nil},
	}
	// an account's device tokens: 20s of life
	devices := &guard.Spec{ID: "dv", Algorithm: guard.Devices, Window: 20 * time.Second}
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
				op guard.Op
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
				var batch []guard.Op
				device := rng.IntN(4) == 0
				if device {
					// a device check first: a token issued up to 30s ago
					// (some expired), of an account revoked now and then
					at := now.Add(-time.Duration(rng.IntN(300)) * 100 * time.Millisecond)
					batch = append(batch, guard.Op{Kind: guard.DeviceCheck, Spec: devices, Tag: tags[rng.IntN(len(tags))], Cost: 1, At: at})
				} else if rng.IntN(15) == 0 {
					batch = append(batch, guard.Op{Kind: guard.Revoke, Spec: devices, Tag: tags[rng.IntN(len(tags))], Cost: 1})
				}
				for range 1 + rng.IntN(3) {
					s := specs[rng.IntN(len(specs))]
					op := guard.Op{Spec: s, Tag: tags[rng.IntN(len(tags))], Cost: 1}
					switch k := rng.IntN(20); {
					case k < 10:
						op.Kind = guard.Take
						if s.Algorithm == guard.FixedWindow && !s.Packed && s.Lockout == nil && rng.IntN(3) == 0 {
							op.Extra = int64(rng.IntN(4))
						}
						if rng.IntN(5) == 0 && s.Algorithm != guard.Distinct {
							op.Cost = 2
						}
					case k < 12:
						op.Kind = guard.Peek
					case k < 14:
						op.Kind = guard.Strike
					case k < 17 && len(takes) > 0:
						tk := takes[rng.IntN(len(takes))]
						op = tk.op
						op.Kind, op.Cost, op.Extra, op.At, op.Cond = guard.Refund, max(tk.n, 1), 0, tk.at, guard.Always
						if rng.IntN(2) == 0 {
							op.Kind = guard.Cancel
						}
						if op.Spec.Algorithm == guard.Concurrency {
							op.Kind = guard.Release
						}
						if rng.IntN(3) == 0 {
							op.At = time.Time{}
						}
					case k < 19:
						op.Kind = guard.Unblock
					default:
						op.Kind, op.Spec, op.MaxWait = guard.Reserve, specs[1], time.Duration(rng.IntN(5))*time.Second
					}
					switch op.Spec.Algorithm {
					case guard.Distinct:
						if op.Member == "" {
							op.Member = string(rune('a' + rng.IntN(5)))
						}
					case guard.SlidingLog, guard.Concurrency:
						if op.Kind == guard.Take {
							members++
							op.Member = fmt.Sprint("m", members)
						}
					}
					if op.Kind == guard.Strike && op.Spec.Lockout == nil && rng.IntN(2) == 0 {
						op.Kind = guard.Take
					}
					if device && (op.Kind == guard.Take || op.Kind == guard.Peek) {
						op.Cond = guard.Cond(rng.IntN(3))
					}
					// one op per rule state in a batch, as the guard makes them
					dup := false
					for _, b := range batch {
						// (a T and a U op of one state: only one of them applies)
						dup = dup || (b.Spec == op.Spec && b.Tag == op.Tag && (b.Cond == op.Cond || b.Cond == guard.Always || op.Cond == guard.Always))
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
					if batch[i].Kind == guard.Take && want[i].Taken > 0 {
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
	spec := &guard.Spec{ID: "fw", Algorithm: guard.FixedWindow, Limit: 3, Window: time.Hour, Enforce: true}
	ctx := context.Background()
	take := func(tag string, kind guard.OpKind) guard.OpResult {
		res, err := mem.Do(ctx, []guard.Op{{Kind: kind, Spec: spec, Tag: tag, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	for i := range max + 500 {
		take(fmt.Sprint(i), guard.Take)
		if i == max+400 {
			take("0", guard.Take) // used again: among the most recent
		}
	}
	if n := mem.Len(); n > max {
		t.Fatalf("%d states held, want at most %d", n, max)
	}
	// The least recently used are forgotten (start afresh), the recent kept.
	if r := take("1", guard.Peek); r.Remaining != 3 {
		t.Errorf("an early subject was kept: %+v", r)
	}
	if r := take(fmt.Sprint(max+499), guard.Peek); r.Remaining != 2 {
		t.Errorf("the last subject was forgotten: %+v", r)
	}
	// ("0" was forgotten once, then taken again near the end: kept)
	if r := take("0", guard.Peek); r.Remaining != 2 {
		t.Errorf("a subject used again was forgotten: %+v", r)
	}
}
