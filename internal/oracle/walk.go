package oracle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
)

// Clock is the walk's time, shared by the oracle and the stores under
// test. It moves only when the walk moves it.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at an instant that is a multiple of every window.
func NewClock() *Clock { return &Clock{t: time.UnixMicro(Origin)} }

// Origin is where walks start (µs): 1.9e9 s, a multiple of every window.
const Origin int64 = 1_900_000_000_000_000

// Now reads the clock.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Grid is the walk's time step: every instant the walk visits, every
// window, period, lockout and TTL the specs make is a multiple of it. (A
// store whose keys expire in real time, redis-server, is kept in step
// by a harness that needs it; see redisstore's oracle test.) Windows are
// multiples of 12.8s so that a window's weights are fractions of 128: the
// stores' floating point is then exact, and a difference from the
// oracle's rationals is a mistake, not a rounding.
const Grid = 100 * time.Millisecond

const w = 12800 * time.Millisecond

var (
	lock1 = &guard.Lockout{Initial: 1600 * time.Millisecond, Factor: 2, Max: 6400 * time.Millisecond, Reset: 2 * w}
	lock2 = &guard.Lockout{Initial: 1600 * time.Millisecond, Factor: 1.5, Max: 6400 * time.Millisecond, Reset: 2 * w}
	pack  = 3 * w // PackTTL: longer than any state a packed rule keeps
)

// Specs are the rules the walks use: every algorithm, on its own key and
// packed, with and without lockouts, elastic limits, ratios at several
// limits (50% hides a wrong formula: (r·a−f)/(1−r) = (r·a−f)/r there),
// small limits so that walks reach them.
func Specs() []*guard.Spec {
	return []*guard.Spec{
		{ID: "fw", Algorithm: guard.FixedWindow, Limit: 3, Window: w, Enforce: true},
		{ID: "fl", Algorithm: guard.FixedWindow, Limit: 2, Window: w, Enforce: true, Lockout: lock1},
		{ID: "fp", Algorithm: guard.FixedWindow, Limit: 4, Window: w / 2, Enforce: true, Packed: true, PackTTL: pack},
		{ID: "fs", Algorithm: guard.FixedWindow, Limit: 2, Window: w, Enforce: false}, // shadow
		{ID: "tb", Algorithm: guard.TokenBucket, Limit: 4, Window: w, Enforce: true},
		{ID: "tp", Algorithm: guard.TokenBucket, Limit: 2, Window: w / 2, Enforce: true, Packed: true, PackTTL: pack, Lockout: lock2},
		{ID: "sw", Algorithm: guard.SlidingWindow, Limit: 4, Window: w, Enforce: true},
		{ID: "sp", Algorithm: guard.SlidingWindow, Limit: 3, Window: w, Enforce: true, Packed: true, PackTTL: pack, Lockout: lock1},
		{ID: "el", Algorithm: guard.SlidingWindow, Limit: 2, Window: w, Enforce: true, Elastic: 0.5},
		{ID: "ep", Algorithm: guard.SlidingWindow, Limit: 2, Window: w, Enforce: true, Packed: true, PackTTL: pack, Elastic: 1.5},
		{ID: "sl", Algorithm: guard.SlidingLog, Limit: 3, Window: w, Enforce: true},
		{ID: "sL", Algorithm: guard.SlidingLog, Limit: 2, Window: w, Enforce: true, Lockout: lock1},
		{ID: "cc", Algorithm: guard.Concurrency, Limit: 2, Window: w, Enforce: true},
		{ID: "ds", Algorithm: guard.Distinct, Limit: 2, Window: w, Enforce: true},
		{ID: "r8", Algorithm: guard.Ratio, Limit: 80, Min: 3, Window: w, Enforce: true},
		{ID: "r6", Algorithm: guard.Ratio, Limit: 60, Min: 5, Window: w, Enforce: true, Packed: true, PackTTL: pack},
		{ID: "r7", Algorithm: guard.Ratio, Limit: 75, Min: 4, Window: w / 2, Enforce: true},
		{ID: "r5", Algorithm: guard.Ratio, Limit: 50, Min: 2, Window: w, Enforce: true, Packed: true, PackTTL: pack},
	}
}

// Options tune a walk.
type Options struct {
	Steps int
	// Slack is, per store name, how much earlier than the oracle's the
	// wait of a fixed window on its own key may be: redis-server reports
	// a key's TTL in whole milliseconds of its own clock, which runs
	// while the walk's stands still.
	Slack map[string]time.Duration
}

// Coverage counts what walks reached; a comparison of nothing proves
// nothing, so a test checks these after its walks.
type Coverage map[string]int

// Walk drives the oracle and the stores with the same random steps on
// clock, and fails t at the first answer that differs from the oracle's
// (allowed, skipped, remaining, retry after, locked, taken; and a
// lockout's reset after, its end). Steps are
// biased to reach limits, lockouts and relocks, elastic growth and window
// edges.
func Walk(t testing.TB, seed uint64, clock *Clock, stores map[string]guard.Store, opt Options, cov Coverage) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 28))
	ref := New(clock.Now)
	specs := Specs()
	var locking, subtle []*guard.Spec
	for _, s := range specs {
		if s.Lockout != nil {
			locking = append(locking, s)
		}
		if s.Algorithm == guard.Ratio || s.Algorithm == guard.Distinct || s.Elastic > 0 {
			subtle = append(subtle, s)
		}
	}
	tags := []string{"AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"}
	names := make([]string, 0, len(stores))
	for n := range stores {
		names = append(names, n)
	}
	slices.Sort(names)
	ctx := context.Background()

	type taken struct {
		op guard.Op
		n  int64
		at time.Time
	}
	var takes []taken
	var edges []time.Time    // instants worth landing on: lockout ends, waits, states' ends
	ends := map[int64]bool{} // the instants where a take's state ends
	var history []string
	members := 0
	steps := opt.Steps
	if steps == 0 {
		steps = 400
	}
	for step := range steps {
		now := clock.Now()
		if rng.IntN(3) == 0 {
			var d time.Duration
			switch k := rng.IntN(10); {
			case k < 4: // a little
				d = Grid * time.Duration(1+rng.IntN(5))
			case k < 7: // to a window edge, or just before or after it
				win := []time.Duration{w, w / 2}[rng.IntN(2)]
				u, wu := now.UnixMicro(), win.Microseconds()
				d = time.Duration(wu-u%wu)*time.Microsecond + Grid*time.Duration(rng.IntN(3)-1)
			case k < 9 && len(edges) > 0: // to a lockout's end or a wait's, on the grid
				e := edges[rng.IntN(len(edges))]
				d = e.Sub(now).Truncate(Grid) + Grid*time.Duration(rng.IntN(3)-1)
			default: // a long while
				d = w * time.Duration(1+rng.IntN(3))
			}
			if d > 0 {
				clock.Add(d)
				now = clock.Now()
			}
		}
		if now.Sub(time.UnixMicro(Origin))%w == 0 {
			cov["a window edge"]++
		}
		if ends[now.UnixMicro()] {
			cov["the instant a state ends"]++
		}
		var batch []guard.Op
		for range 1 + rng.IntN(3) {
			s := specs[rng.IntN(len(specs))]
			switch rng.IntN(6) {
			case 0, 1: // to the rules with lockouts: relocks
				s = locking[rng.IntN(len(locking))]
			case 2: // to ratios, distinct and elastic rules
				s = subtle[rng.IntN(len(subtle))]
			}
			op := guard.Op{Spec: s, Tag: tags[rng.IntN(len(tags))], Cost: 1}
			switch k := rng.IntN(100); {
			case k < 50:
				op.Kind = guard.Take
				if rng.IntN(5) == 0 && s.Algorithm != guard.Distinct && s.Algorithm != guard.Ratio {
					op.Cost = 2
				}
			case k < 58:
				op.Kind = guard.Peek
			case k < 72:
				op.Kind = guard.Strike
				if s.Lockout == nil && rng.IntN(2) == 0 {
					op.Kind = guard.Take
				}
			case k < 96 && len(takes) > 0:
				tk := takes[rng.IntN(len(takes))]
				if rng.IntN(2) == 0 { // most refunds go to elastic rules and ratios: growth, and failures given back
					for _, c := range takes {
						if c.op.Spec.Elastic > 0 || c.op.Spec.Algorithm == guard.Ratio {
							tk = c
						}
					}
				}
				op = tk.op
				op.Kind, op.Cost, op.At = guard.Refund, tk.n, tk.at
				if rng.IntN(3) == 0 {
					op.Kind = guard.Cancel
				}
				if op.Spec.Algorithm == guard.Concurrency {
					op.Kind = guard.Release
				}
				if rng.IntN(4) == 0 {
					op.At = time.Time{}
				}
			default:
				op.Kind = guard.Unblock
			}
			switch op.Spec.Algorithm {
			case guard.Distinct:
				if op.Member == "" {
					op.Member = string(rune('a' + rng.IntN(5)))
				}
			case guard.SlidingLog, guard.Concurrency:
				if op.Kind == guard.Take || op.Kind == guard.Peek {
					members++
					op.Member = fmt.Sprint("m", members)
				}
			}
			// one op per rule state in a batch, as the guard makes them
			dup := false
			for _, b := range batch {
				dup = dup || (b.Spec == op.Spec && b.Tag == op.Tag)
			}
			if !dup {
				batch = append(batch, op)
			}
		}

		want, err := ref.Do(ctx, batch)
		if err != nil {
			t.Fatalf("step %d: oracle: %v", step, err)
		}
		var line strings.Builder
		fmt.Fprintf(&line, "step %d at +%s:", step, now.Sub(time.UnixMicro(Origin)))
		for i, op := range batch {
			fmt.Fprintf(&line, " [%s %s tag %c cost %d member %q at %s → %s]", op.Kind, op.Spec.ID, op.Tag[0], op.Cost, op.Member,
				atString(op.At), resString(want[i]))
		}
		history = append(history, line.String())
		if len(history) > 40 {
			history = history[1:]
		}
		var resets []time.Duration // where each take's state ends, as the first store says (the oracle keeps no such answer)
		for _, name := range names {
			got, err := stores[name].Do(ctx, batch)
			if err != nil {
				t.Fatalf("step %d: %s: %v", step, name, err)
			}
			if resets == nil {
				for i := range batch {
					resets = append(resets, got[i].ResetAfter)
				}
			}
			for i := range batch {
				if !same(want[i], got[i], batch[i], opt.Slack[name]) {
					t.Fatalf("seed %d step %d op %d (%s %s tag %c cost %d member %q):\n oracle %s\n %-6s %s\nthe last steps (oracle's answers):\n%s",
						seed, step, i, batch[i].Kind, batch[i].Spec.ID, batch[i].Tag[0], batch[i].Cost, batch[i].Member,
						resString(want[i]), name, resString(got[i]), strings.Join(history, "\n"))
				}
			}
		}
		for i, op := range batch {
			r := want[i]
			alg := string(op.Spec.Algorithm)
			switch {
			case op.Kind == guard.Take && r.Taken > 0:
				takes = append(takes, taken{op, r.Taken, now})
				if len(takes) > 60 {
					takes = takes[1:]
				}
				if op.Spec.Elastic > 0 && r.Remaining+r.Taken > op.Spec.Limit {
					cov["an elastic limit grown"]++
				}
			case op.Kind == guard.Take && !r.Allowed && r.Locked:
				cov["a take locked out"]++
			case op.Kind == guard.Take && !r.Allowed && !r.Skipped:
				cov["a denial by "+alg]++
			case op.Kind == guard.Strike && r.Locked && r.RetryAfter > op.Spec.Lockout.Initial:
				cov["a relock"]++
			}
			if r.RetryAfter > 0 {
				edges = append(edges, now.Add(r.RetryAfter))
			}
			if op.Kind == guard.Take && r.Allowed && resets[i] > 0 {
				// where the state this take counted on ends: a fixed
				// window's last instant, landed on exactly
				edges = append(edges, now.Add(resets[i]))
				ends[now.Add(resets[i]).UnixMicro()] = true
			}
			if len(edges) > 20 {
				edges = edges[len(edges)-20:]
			}
		}
	}
}

// WantCovered are the Coverage keys every campaign of walks must reach.
var WantCovered = []string{"a window edge", "the instant a state ends", "an elastic limit grown", "a take locked out", "a relock",
	"a denial by fixed_window", "a denial by token_bucket", "a denial by sliding_window", "a denial by sliding_log",
	"a denial by concurrency", "a denial by distinct", "a denial by ratio"}

func same(want, got guard.OpResult, op guard.Op, slack time.Duration) bool {
	if want.Allowed != got.Allowed || want.Skipped != got.Skipped || want.Remaining != got.Remaining ||
		want.Locked != got.Locked || want.Taken != got.Taken {
		return false
	}
	if want.Locked && got.ResetAfter != want.RetryAfter {
		return false // a lockout's state ends with it
	}
	if slack > 0 && op.Spec.Algorithm == guard.FixedWindow && !op.Spec.Packed && !want.Allowed && !want.Locked {
		return got.RetryAfter <= want.RetryAfter && got.RetryAfter > want.RetryAfter-slack
	}
	return want.RetryAfter == got.RetryAfter
}

func atString(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return t.Sub(time.UnixMicro(Origin)).String()
}

func resString(r guard.OpResult) string {
	return fmt.Sprintf("{allowed %v skipped %v remaining %d retry %s locked %v taken %d}", r.Allowed, r.Skipped, r.Remaining, r.RetryAfter, r.Locked, r.Taken)
}
