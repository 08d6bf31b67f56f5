// Package oracle is a deliberately naive reference model of the guard's
// rate-limit algorithms, for tests only: fixed and sliding windows, the
// token bucket, the sliding log, concurrency, distinct, ratio, elastic
// limits and lockout escalation. It shares no code with the Lua library
// (guard/redisstore/otpguard.lua) or the backstop (guard/memstore), and
// it is written for clarity, not speed:
//
//   - it keeps history, not summaries: a count per aligned window in a map
//     that is never pruned, every log entry, lease and distinct value with
//     its time, a token bucket as the credit it holds;
//   - it computes in exact rationals (math/big), where the stores use
//     floating point;
//   - it finds a denied request's wait by asking "is it admitted at t?"
//     for t after now (a binary search over microseconds where admission
//     only grows with time; the ratio's two pieces searched apart), never
//     by a closed formula.
//
// What it leaves out: rules in mode challenge (their semantics are
// changing: a challenged take will commit only once proven), leases
// (Op.Extra), Reserve and device checks. The walk in this package drives
// it and the stores with the same operations and compares every answer.
package oracle

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// Store is the oracle: a store.Store in memory. Its zero value is not
// usable; call New.
type Store struct {
	now    func() time.Time
	states map[string]*state
}

// New returns an empty oracle reading time from now.
func New(now func() time.Time) *Store {
	return &Store{now: now, states: map[string]*state{}}
}

// entry is one element of a set algorithm: a log entry, a lease or a
// distinct value, and its time (for a lease, when it expires).
type entry struct {
	member string
	at     int64
}

// state is everything that ever happened to one rule for one subject.
type state struct {
	// fixed_window: the window's start (none: -1) and its count
	fwStart, fwCount int64
	// token_bucket: the credit held at creditAt, in µs of refill
	credit, creditAt int64
	full             bool // never taken: a full bucket
	// sliding_window and ratio: counts per aligned window (start / window)
	count, verified     map[int64]int64
	attempts, failures  map[int64]int64
	entries             []entry
	lockedUntil, strike int64 // lockout: until when; how many
	strikesUntil        int64 // when the strikes are forgotten
}

func newState() *state {
	return &state{fwStart: -1, full: true, count: map[int64]int64{}, verified: map[int64]int64{},
		attempts: map[int64]int64{}, failures: map[int64]int64{}}
}

// clear forgets the counter (not the lockout).
func (st *state) clear() {
	l, s, x := st.lockedUntil, st.strike, st.strikesUntil
	*st = *newState()
	st.lockedUntil, st.strike, st.strikesUntil = l, s, x
}

// rule is an op's spec and state, with the algorithm's questions.
type rule struct {
	spec *store.Spec
	st   *state
	win  int64 // µs
}

func us(d time.Duration) int64 { return d.Microseconds() }

// windowOf is the aligned window that holds t, and how far into it t is.
func (r rule) windowOf(t int64) (idx, elapsed int64) {
	idx = t / r.win
	if t%r.win < 0 {
		idx--
	}
	return idx, t - idx*r.win
}

// weight is the part of the previous window still inside the sliding
// window at t: (window - elapsed) / window.
func (r rule) weight(t int64) *big.Rat {
	_, e := r.windowOf(t)
	return big.NewRat(r.win-e, r.win)
}

func rat(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

func add(a, b *big.Rat) *big.Rat { return new(big.Rat).Add(a, b) }
func mul(a, b *big.Rat) *big.Rat { return new(big.Rat).Mul(a, b) }

// floor and ceil of a rational, as integers.
func floor(x *big.Rat) int64 {
	q := new(big.Int)
	m := new(big.Int)
	q.DivMod(x.Num(), x.Denom(), m) // Euclidean: floor for a positive denominator
	return q.Int64()
}

func ceil(x *big.Rat) int64 {
	f := floor(x)
	if rat(f).Cmp(x) == 0 {
		return f
	}
	return f + 1
}

// --- the algorithms: room is how many more units are admitted at t
// (never negative), with the state as it is.

// fixed_window: the window starts at the first hit and lasts one window.
func (r rule) fwLive(t int64) bool { return r.st.fwStart >= 0 && r.st.fwStart+r.win > t }

func (r rule) fwRoom(t int64) int64 {
	if !r.fwLive(t) {
		return r.spec.Limit
	}
	return max(0, r.spec.Limit-r.st.fwCount)
}

// token_bucket: holds up to limit tokens, one back every period, in µs
// of credit (a token is one period).
func (r rule) period() int64 { return (r.win + r.spec.Limit - 1) / r.spec.Limit }

func (r rule) tbCredit(t int64) int64 {
	full := r.period() * r.spec.Limit
	if r.st.full {
		return full
	}
	return min(full, r.st.credit+(t-r.st.creditAt))
}

func (r rule) tbRoom(t int64) int64 { return r.tbCredit(t) / r.period() }

// sliding_window: this window's count and the previous one's, weighted
// by the part still inside, rounded up.
func (r rule) swEstimate(t int64) int64 {
	idx, _ := r.windowOf(t)
	return r.st.count[idx] + ceil(mul(rat(r.st.count[idx-1]), r.weight(t)))
}

// swLimit is the limit, or an elastic rule's: max(limit, ratio × the
// verified units in the sliding window, weighted as the count is).
func (r rule) swLimit(t int64) int64 {
	if r.spec.Elastic == 0 {
		return r.spec.Limit
	}
	idx, _ := r.windowOf(t)
	s := add(rat(r.st.verified[idx]), mul(rat(r.st.verified[idx-1]), r.weight(t)))
	return max(r.spec.Limit, floor(mul(new(big.Rat).SetFloat64(r.spec.Elastic), s)))
}

func (r rule) swRoom(t, limit int64) int64 { return max(0, limit-r.swEstimate(t)) }

// ratio: attempts and failures counted as a sliding window does; an
// attempt is admitted while fewer than min were seen, or while failures
// stay below limit% of attempts. room counts the failed attempts
// admitted one after another.
func (r rule) rtAdmits(t, k int64) bool {
	idx, _ := r.windowOf(t)
	w := r.weight(t)
	a := add(rat(r.st.attempts[idx]+k), mul(rat(r.st.attempts[idx-1]), w))
	f := add(rat(r.st.failures[idx]+k), mul(rat(r.st.failures[idx-1]), w))
	if a.Cmp(rat(r.spec.Min)) < 0 {
		return true
	}
	return mul(rat(100), f).Cmp(mul(rat(r.spec.Limit), a)) < 0
}

func (r rule) rtRoom(t int64) int64 {
	var k int64
	for k < 1_000_000 && r.rtAdmits(t, k) {
		k++
	}
	return k
}

// the set algorithms: entries alive at t
func (r rule) live(t int64) int64 {
	var n int64
	for _, e := range r.st.entries {
		if r.alive(e, t) {
			n++
		}
	}
	return n
}

func (r rule) alive(e entry, t int64) bool {
	if r.spec.Algorithm == store.Concurrency {
		return e.at > t // a lease lives until it expires
	}
	return e.at > t-r.win // seen within the window
}

func (r rule) find(member string) int {
	for i, e := range r.st.entries {
		if e.member == member {
			return i
		}
	}
	return -1
}

// seen reports a distinct value seen within the window.
func (r rule) seen(t int64, member string) bool {
	i := r.find(member)
	return i >= 0 && r.alive(r.st.entries[i], t)
}

// room is how many units the rule admits at t (for distinct: new values).
func (r rule) room(t int64) int64 {
	switch r.spec.Algorithm {
	case store.FixedWindow:
		return r.fwRoom(t)
	case store.TokenBucket:
		return r.tbRoom(t)
	case store.SlidingWindow:
		return r.swRoom(t, r.swLimit(t))
	case store.Ratio:
		return r.rtRoom(t)
	case store.SlidingLog, store.Concurrency, store.Distinct:
		return max(0, r.spec.Limit-r.live(t))
	}
	panic("oracle: algorithm " + string(r.spec.Algorithm))
}

// need is how many units a take of cost needs: a distinct value already
// seen needs none.
func (r rule) need(t int64, op *store.Op) int64 {
	if r.spec.Algorithm == store.Distinct {
		if r.seen(t, op.Member) {
			return 0
		}
		return 1
	}
	return op.Cost
}

// wait is how long after now a take of cost is first admitted if
// nothing else happens: the first microsecond at which it is.
func (r rule) wait(now, cost int64) int64 {
	switch r.spec.Algorithm {
	case store.SlidingWindow:
		// An elastic limit is taken as it stands now: the wait tells
		// when the count has decayed to it (the limit's own decay is
		// not foreseen).
		limit := r.swLimit(now)
		return first(now, now+3*r.win, func(t int64) bool { return limit-r.swEstimate(t) >= cost }) - now
	case store.Ratio:
		// Weighted counts fall linearly within each window: once denied,
		// admission only grows within this window, then within the next
		// (each searched on its own); after two, nothing is counted.
		idx, _ := r.windowOf(now)
		end1, end2 := (idx+1)*r.win, (idx+2)*r.win
		ok := func(t int64) bool { return r.rtAdmits(t, cost-1) }
		switch {
		case ok(end1 - 1):
			return first(now, end1-1, ok) - now
		case ok(end2 - 1):
			return first(end1-1, end2-1, ok) - now
		}
		return end2 - now
	}
	return first(now, now+3*r.win, func(t int64) bool { return r.room(t) >= cost }) - now
}

// first returns the first t in (from, to] at which ok holds, ok growing
// with t: a binary search over microseconds.
func first(from, to int64, ok func(int64) bool) int64 {
	if !ok(to) {
		panic(fmt.Sprintf("oracle: never admitted within %dµs", to-from))
	}
	lo, hi := from, to // ok(hi); lo is not known to be ok
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// --- writes

// Do implements store.Store: the takes and peeks are checked in order
// until an enforcing rule denies; the batch takes only if none did.
func (s *Store) Do(_ context.Context, ops []store.Op) ([]store.OpResult, error) {
	now := s.now().UnixMicro()
	t := time.UnixMicro(now)
	res := make([]store.OpResult, len(ops))
	rules, err := s.rules(ops)
	if err != nil {
		return nil, err
	}

	allowed := true
	ok := make([]bool, len(ops))
	for i := range ops {
		op, r := &ops[i], rules[i]
		if op.Kind != store.Take && op.Kind != store.Peek {
			continue
		}
		if !allowed {
			res[i] = store.OpResult{Allowed: true, Skipped: true, Now: t}
			continue
		}
		res[i], ok[i] = r.check(now, t, op)
		if !res[i].Allowed && op.Spec.Enforce {
			allowed = false
		}
	}

	for i := range ops {
		rules[i].write(now, t, &ops[i], &res[i], ok[i] && allowed)
	}
	return res, nil
}

var _ store.Store = (*Store)(nil)
