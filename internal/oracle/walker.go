package oracle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// taken is a take the oracle granted, kept so that a later step can give
// it back.
type taken struct {
	op store.Op
	n  int64
	at time.Time
}

// walker is one walk's state: its random source, the rules it picks
// from, and what earlier steps left for later ones to aim at.
type walker struct {
	t      testing.TB
	seed   uint64
	rng    *rand.Rand
	clock  *Clock
	ref    *Store
	stores map[string]store.Store
	names  []string
	opt    Options
	cov    Coverage
	ctx    context.Context

	specs, locking, subtle []*store.Spec
	tags                   []string

	takes   []taken
	edges   []time.Time    // instants worth landing on: lockout ends, waits, states' ends
	ends    map[int64]bool // the instants where a take's state ends
	history []string
	members int
}

// newWalker sets up a walk: the rules, split into those with lockouts and
// the subtle ones (ratios, distinct, elastic) that steps favour, and the
// stores' names in a fixed order.
func newWalker(t testing.TB, seed uint64, clock *Clock, stores map[string]store.Store, opt Options, cov Coverage) *walker {
	k := &walker{t: t, seed: seed, clock: clock, stores: stores, opt: opt, cov: cov}
	k.rng = rand.New(rand.NewPCG(seed, 28))
	k.ref = New(clock.Now)
	k.specs = Specs()
	for _, s := range k.specs {
		if s.Lockout != nil {
			k.locking = append(k.locking, s)
		}
		if s.Algorithm == store.Ratio || s.Algorithm == store.Distinct || s.Elastic > 0 {
			k.subtle = append(k.subtle, s)
		}
	}
	// (tags of varied characters, as keyed hashes are: a mistake in which
	// of a key's bytes are read does not pass for right)
	k.tags = []string{"AKz9cY0qQ3xWfT1mB7nLp2", "Bb4R_tE8-wQ1zXc5VnM2kP"}
	k.names = make([]string, 0, len(stores))
	for n := range stores {
		k.names = append(k.names, n)
	}
	slices.Sort(k.names)
	k.ctx = context.Background()
	k.ends = map[int64]bool{}
	return k
}

// step is one step of the walk: maybe move the clock, make a batch, ask
// the oracle and every store, compare, and note what was reached.
func (k *walker) step(step int) {
	k.t.Helper()
	now := k.advance()
	if now.Sub(time.UnixMicro(Origin))%w == 0 {
		k.cov["a window edge"]++
	}
	if k.ends[now.UnixMicro()] {
		k.cov["the instant a state ends"]++
	}
	batch := k.batch()

	want, err := k.ref.Do(k.ctx, batch)
	if err != nil {
		k.t.Fatalf("step %d: oracle: %v", step, err)
	}
	k.record(step, now, batch, want)
	resets := k.compare(step, batch, want)
	k.note(now, batch, want, resets)
}

// advance moves the clock, one step in three, by a little, to a window
// edge, to an edge an earlier step found, or by a long while; it returns
// the time after.
func (k *walker) advance() time.Time {
	rng := k.rng
	now := k.clock.Now()
	if rng.IntN(3) == 0 {
		var d time.Duration
		switch c := rng.IntN(10); {
		case c < 4: // a little
			d = Grid * time.Duration(1+rng.IntN(5))
		case c < 7: // to a window edge, or just before or after it
			win := []time.Duration{w, w / 2}[rng.IntN(2)]
			u, wu := now.UnixMicro(), win.Microseconds()
			d = time.Duration(wu-u%wu)*time.Microsecond + Grid*time.Duration(rng.IntN(3)-1)
		case c < 9 && len(k.edges) > 0: // to a lockout's end or a wait's, on the grid
			e := k.edges[rng.IntN(len(k.edges))]
			d = e.Sub(now).Truncate(Grid) + Grid*time.Duration(rng.IntN(3)-1)
		default: // a long while
			d = w * time.Duration(1+rng.IntN(3))
		}
		if d > 0 {
			k.clock.Add(d)
			now = k.clock.Now()
		}
	}
	return now
}

// batch makes one to three ops, at most one per rule state.
func (k *walker) batch() []store.Op {
	var batch []store.Op
	for range 1 + k.rng.IntN(3) {
		op := k.op()
		// one op per rule state in a batch, as the guard makes them
		dup := false
		for _, b := range batch {
			dup = dup || (b.Spec == op.Spec && b.Tag == op.Tag)
		}
		if !dup {
			batch = append(batch, op)
		}
	}
	return batch
}

// op makes one random op, biased to the rules with lockouts and the
// subtle ones, and to refunds of earlier takes.
func (k *walker) op() store.Op {
	rng := k.rng
	s := k.specs[rng.IntN(len(k.specs))]
	switch rng.IntN(6) {
	case 0, 1: // to the rules with lockouts: relocks
		s = k.locking[rng.IntN(len(k.locking))]
	case 2: // to ratios, distinct and elastic rules
		s = k.subtle[rng.IntN(len(k.subtle))]
	}
	op := store.Op{Spec: s, Tag: k.tags[rng.IntN(len(k.tags))], Cost: 1}
	switch c := rng.IntN(100); {
	case c < 50:
		op.Kind = store.Take
		if rng.IntN(5) == 0 && s.Algorithm != store.Distinct && s.Algorithm != store.Ratio {
			op.Cost = 2
		}
	case c < 58:
		op.Kind = store.Peek
	case c < 72:
		op.Kind = store.Strike
		if s.Lockout == nil && rng.IntN(2) == 0 {
			op.Kind = store.Take
		}
	case c < 96 && len(k.takes) > 0:
		op = k.giveBack()
	default:
		op.Kind = store.Unblock
	}
	k.member(&op)
	return op
}

// giveBack makes an op that returns an earlier take: a refund, a cancel,
// or a release for a concurrency rule, sometimes without its instant.
func (k *walker) giveBack() store.Op {
	rng := k.rng
	tk := k.takes[rng.IntN(len(k.takes))]
	if rng.IntN(2) == 0 { // most refunds go to elastic rules and ratios: growth, and failures given back
		for _, c := range k.takes {
			if c.op.Spec.Elastic > 0 || c.op.Spec.Algorithm == store.Ratio {
				tk = c
			}
		}
	}
	op := tk.op
	op.Kind, op.Cost, op.At = store.Refund, tk.n, tk.at
	if rng.IntN(3) == 0 {
		op.Kind = store.Cancel
	}
	if op.Spec.Algorithm == store.Concurrency {
		op.Kind = store.Release
	}
	if rng.IntN(4) == 0 {
		op.At = time.Time{}
	}
	return op
}

// member gives op the member its rule needs: one of a few for distinct,
// a new one for a take or peek of a sliding log or concurrency rule.
func (k *walker) member(op *store.Op) {
	switch op.Spec.Algorithm {
	case store.Distinct:
		if op.Member == "" {
			op.Member = string(rune('a' + k.rng.IntN(5)))
		}
	case store.SlidingLog, store.Concurrency:
		if op.Kind == store.Take || op.Kind == store.Peek {
			k.members++
			op.Member = fmt.Sprint("m", k.members)
		}
	}
}

// record adds a line for this step, with the oracle's answers, to the
// history a failure prints (the last 40 steps).
func (k *walker) record(step int, now time.Time, batch []store.Op, want []store.OpResult) {
	var line strings.Builder
	fmt.Fprintf(&line, "step %d at +%s:", step, now.Sub(time.UnixMicro(Origin)))
	for i, op := range batch {
		fmt.Fprintf(&line, " [%s %s tag %c cost %d member %q at %s → %s]", op.Kind, op.Spec.ID, op.Tag[0], op.Cost, op.Member,
			atString(op.At), resString(want[i]))
	}
	k.history = append(k.history, line.String())
	if len(k.history) > 40 {
		k.history = k.history[1:]
	}
}

// compare runs batch on every store and fails the test at the first
// answer that differs from the oracle's. It returns where each take's
// state ends, as the first store says (the oracle keeps no such answer).
func (k *walker) compare(step int, batch []store.Op, want []store.OpResult) []time.Duration {
	k.t.Helper()
	var resets []time.Duration
	for _, name := range k.names {
		got, err := k.stores[name].Do(k.ctx, batch)
		if err != nil {
			k.t.Fatalf("step %d: %s: %v", step, name, err)
		}
		if resets == nil {
			for i := range batch {
				resets = append(resets, got[i].ResetAfter)
			}
		}
		for i := range batch {
			if !same(want[i], got[i], batch[i], k.opt.Slack[name]) {
				k.t.Fatalf("seed %d step %d op %d (%s %s tag %c cost %d member %q):\n oracle %s\n %-6s %s\nthe last steps (oracle's answers):\n%s",
					k.seed, step, i, batch[i].Kind, batch[i].Spec.ID, batch[i].Tag[0], batch[i].Cost, batch[i].Member,
					resString(want[i]), name, resString(got[i]), strings.Join(k.history, "\n"))
			}
		}
	}
	return resets
}

// note counts what the step reached and keeps the takes later steps may
// give back and the instants they may land on.
func (k *walker) note(now time.Time, batch []store.Op, want []store.OpResult, resets []time.Duration) {
	for i, op := range batch {
		r := want[i]
		alg := string(op.Spec.Algorithm)
		switch {
		case op.Kind == store.Take && r.Taken > 0:
			k.takes = append(k.takes, taken{op, r.Taken, now})
			if len(k.takes) > 60 {
				k.takes = k.takes[1:]
			}
			if op.Spec.Elastic > 0 && r.Remaining+r.Taken > op.Spec.Limit {
				k.cov["an elastic limit grown"]++
			}
		case op.Kind == store.Take && !r.Allowed && r.Locked:
			k.cov["a take locked out"]++
		case op.Kind == store.Take && !r.Allowed && !r.Skipped:
			k.cov["a denial by "+alg]++
		case op.Kind == store.Strike && r.Locked && r.RetryAfter > op.Spec.Lockout.Initial:
			k.cov["a relock"]++
		}
		if r.RetryAfter > 0 {
			k.edges = append(k.edges, now.Add(r.RetryAfter))
		}
		if op.Kind == store.Take && r.Allowed && resets[i] > 0 {
			// where the state this take counted on ends: a fixed
			// window's last instant, landed on exactly
			k.edges = append(k.edges, now.Add(resets[i]))
			k.ends[now.Add(resets[i]).UnixMicro()] = true
		}
		if len(k.edges) > 20 {
			k.edges = k.edges[len(k.edges)-20:]
		}
	}
}
