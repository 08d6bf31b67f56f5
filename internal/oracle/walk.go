package oracle

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/store"
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
	lock1 = &store.Lockout{Initial: 1600 * time.Millisecond, Factor: 2, Max: 6400 * time.Millisecond, Reset: 2 * w}
	lock2 = &store.Lockout{Initial: 1600 * time.Millisecond, Factor: 1.5, Max: 6400 * time.Millisecond, Reset: 2 * w}
	pack  = 3 * w // PackTTL: longer than any state a packed rule keeps
)

// Specs are the rules the walks use: every algorithm, on its own key and
// packed, with and without lockouts, elastic limits, ratios at several
// limits (50% hides a wrong formula: (r·a−f)/(1−r) = (r·a−f)/r there),
// small limits so that walks reach them.
func Specs() []*store.Spec {
	return []*store.Spec{
		{ID: "fw", Algorithm: store.FixedWindow, Limit: 3, Window: w, Enforce: true},
		{ID: "fl", Algorithm: store.FixedWindow, Limit: 2, Window: w, Enforce: true, Lockout: lock1},
		{ID: "fp", Algorithm: store.FixedWindow, Limit: 4, Window: w / 2, Enforce: true, Packed: true, PackTTL: pack},
		{ID: "fs", Algorithm: store.FixedWindow, Limit: 2, Window: w, Enforce: false}, // shadow
		{ID: "tb", Algorithm: store.TokenBucket, Limit: 4, Window: w, Enforce: true},
		{ID: "tp", Algorithm: store.TokenBucket, Limit: 2, Window: w / 2, Enforce: true, Packed: true, PackTTL: pack, Lockout: lock2},
		{ID: "sw", Algorithm: store.SlidingWindow, Limit: 4, Window: w, Enforce: true},
		{ID: "sp", Algorithm: store.SlidingWindow, Limit: 3, Window: w, Enforce: true, Packed: true, PackTTL: pack, Lockout: lock1},
		{ID: "el", Algorithm: store.SlidingWindow, Limit: 2, Window: w, Enforce: true, Elastic: 0.5},
		{ID: "ep", Algorithm: store.SlidingWindow, Limit: 2, Window: w, Enforce: true, Packed: true, PackTTL: pack, Elastic: 1.5},
		{ID: "sl", Algorithm: store.SlidingLog, Limit: 3, Window: w, Enforce: true},
		{ID: "sL", Algorithm: store.SlidingLog, Limit: 2, Window: w, Enforce: true, Lockout: lock1},
		{ID: "cc", Algorithm: store.Concurrency, Limit: 2, Window: w, Enforce: true},
		{ID: "ds", Algorithm: store.Distinct, Limit: 2, Window: w, Enforce: true},
		{ID: "r8", Algorithm: store.Ratio, Limit: 80, Min: 3, Window: w, Enforce: true},
		{ID: "r6", Algorithm: store.Ratio, Limit: 60, Min: 5, Window: w, Enforce: true, Packed: true, PackTTL: pack},
		{ID: "r7", Algorithm: store.Ratio, Limit: 75, Min: 4, Window: w / 2, Enforce: true},
		{ID: "r5", Algorithm: store.Ratio, Limit: 50, Min: 2, Window: w, Enforce: true, Packed: true, PackTTL: pack},
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
func Walk(t testing.TB, seed uint64, clock *Clock, stores map[string]store.Store, opt Options, cov Coverage) {
	t.Helper()
	k := newWalker(t, seed, clock, stores, opt, cov)
	steps := opt.Steps
	if steps == 0 {
		steps = 400
	}
	for step := range steps {
		k.step(step)
	}
}

// WantCovered are the Coverage keys every campaign of walks must reach.
var WantCovered = []string{"a window edge", "the instant a state ends", "an elastic limit grown", "a take locked out", "a relock",
	"a denial by fixed_window", "a denial by token_bucket", "a denial by sliding_window", "a denial by sliding_log",
	"a denial by concurrency", "a denial by distinct", "a denial by ratio"}

func same(want, got store.OpResult, op store.Op, slack time.Duration) bool {
	if want.Allowed != got.Allowed || want.Skipped != got.Skipped || want.Remaining != got.Remaining ||
		want.Locked != got.Locked || want.Taken != got.Taken {
		return false
	}
	if want.Locked && got.ResetAfter != want.RetryAfter {
		return false // a lockout's state ends with it
	}
	if slack > 0 && op.Spec.Algorithm == store.FixedWindow && !op.Spec.Packed && !want.Allowed && !want.Locked {
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

func resString(r store.OpResult) string {
	return fmt.Sprintf("{allowed %v skipped %v remaining %d retry %s locked %v taken %d}", r.Allowed, r.Skipped, r.Remaining, r.RetryAfter, r.Locked, r.Taken)
}
