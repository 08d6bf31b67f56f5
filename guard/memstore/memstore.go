// Package memstore is a guard.Store in this process's memory: the backstop
// that decides for rules with onStoreError: allow while Redis fails. It
// implements every algorithm, lockout and operation kind of the Redis
// library (redisstore's otpguard.lua) with the same semantics; a test
// drives both through the same operations at fixed instants and compares
// every result, and a table of algorithm properties runs against both.
//
// While Redis answers it decides nothing: the guard hands it each answer
// (Mirror), so that its state for a subject is what Redis last said, and
// the changes made outside a decision (refunds, releases, unblocks). It
// counts on its own only from the moment Redis fails, starting from there.
//
// Its state is bounded: at most its limit of (rule, subject) states, the
// least recently used forgotten first, in constant time per operation (a
// forgotten subject starts afresh: the backstop is a last line, not an
// exact one).
package memstore

import (
	"context"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/otpguard/otpguard/guard"
)

// MaxEntries is the default bound on the (rule, subject) states a Store
// keeps.
const MaxEntries = 100_000

// Store is the in-memory guard.Store. Its zero value is not usable; call New.
type Store struct {
	clock func() time.Time
	max   int
	mu    sync.Mutex
	m     map[string]*state
	// the states in order of use: head the most recent, tail the least
	head, tail *state
}

// New returns an empty Store reading time from clock (time.Now when nil),
// holding at most MaxEntries states.
func New(clock func() time.Time) *Store { return NewSized(clock, MaxEntries) }

// NewSized is New with a bound of max states.
func NewSized(clock func() time.Time, max int) *Store {
	if clock == nil {
		clock = time.Now
	}
	return &Store{clock: clock, max: max, m: map[string]*state{}}
}

var _ guard.Backstop = (*Store)(nil)

type entry struct {
	score  int64
	member string
}

// state is one rule's state for one subject; each algorithm uses its part.
type state struct {
	key          string
	prev, next   *state  // the use order
	c, e         int64   // fixed_window: count, window end
	tat          int64   // token_bucket
	ws, cur, prv int64   // sliding_window (and ratio: ws)
	vc, vp       int64   // an elastic sliding_window's verified units
	ca, cf       int64   // ratio: this window's attempts and failures
	pa, pf       int64   // ratio: the previous window's
	rv           int64   // devices: revoked at
	z            []entry // sliding_log, concurrency, distinct: by score
	l, s, x      int64   // lockout: locked until, strikes, strikes forgotten at
	pending      int64   // units of takes in flight to the store (Begin)
	expires      int64   // when all of it is gone
}

// op is an Op being applied, with what its check read.
type op struct {
	*guard.Op
	st                        *state
	limit, window, cost       int64
	ok, seen                  bool
	allowAt                   int64
	res                       [6]int64
	lockInitial, lockMax, rst int64
	factor                    float64
	now                       int64
}

// get returns key's state, fresh when it had ended, as the most recently
// used; the least recently used go when there are too many.
func (s *Store) get(key string, now int64) *state {
	st := s.m[key]
	if st == nil {
		st = &state{key: key}
		s.m[key] = st
	} else {
		s.unlink(st)
		if st.expires <= now {
			*st = state{key: key}
		}
	}
	st.next = s.head
	if s.head != nil {
		s.head.prev = st
	}
	s.head = st
	if s.tail == nil {
		s.tail = st
	}
	return st
}

func (s *Store) unlink(st *state) {
	if st.prev != nil {
		st.prev.next = st.next
	} else if s.head == st {
		s.head = st.next
	}
	if st.next != nil {
		st.next.prev = st.prev
	} else if s.tail == st {
		s.tail = st.prev
	}
	st.prev, st.next = nil, nil
}

func (s *Store) remove(st *state) {
	s.unlink(st)
	delete(s.m, st.key)
}

// trim forgets the least recently used states beyond the bound, and a few
// that have ended at the tail: constant work per operation.
func (s *Store) trim(now int64) {
	for len(s.m) > s.max && s.tail != nil {
		s.remove(s.tail)
	}
	for range 2 {
		if t := s.tail; t != nil && t.expires <= now && t != s.head {
			s.remove(t)
		}
	}
}

func key(o *guard.Op) string { return o.Tag + "\x00" + o.Spec.ID }

func (s *Store) ops(ops []guard.Op, now int64) []*op {
	all := make([]*op, len(ops))
	for i := range ops {
		o := &ops[i]
		p := &op{Op: o, st: s.get(key(o), now), limit: o.Spec.Limit, window: o.Spec.Window.Microseconds(), cost: o.Cost, now: now}
		if l := o.Spec.Lockout; l != nil {
			p.lockInitial, p.factor, p.lockMax, p.rst = l.Initial.Microseconds(), l.Factor, l.Max.Microseconds(), l.Reset.Microseconds()
		}
		all[i] = p
	}
	return all
}

// Do implements guard.Store.
func (s *Store) Do(_ context.Context, ops []guard.Op) ([]guard.OpResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock().UnixMicro()
	all := s.ops(ops, now)

	allowed, trusted := true, false
	for _, p := range all {
		if p.Kind == guard.DeviceCheck {
			trusted = p.At.UnixMicro() > p.st.rv && now < p.At.UnixMicro()+p.window
			p.res = [6]int64{b2i(trusted)}
			continue
		}
		if p.Kind != guard.Take && p.Kind != guard.Peek {
			continue
		}
		if p.Cond != guard.Always && (p.Cond == guard.CondTrusted) != trusted {
			p.res = [6]int64{3}
			continue
		}
		if !allowed {
			p.res = [6]int64{2}
			continue
		}
		ok, rem, reset, retry, locked := p.check(now, p.cost)
		p.ok = ok
		p.res = [6]int64{b2i(ok), rem, reset, retry, b2i(locked), 0}
		if p.Spec.Enforce && !ok {
			if p.Spec.Challenge {
				p.res[0] = 4 // challenged: does not deny; takes only a failure-counting rule's units
			} else {
				allowed = false
			}
		}
	}

	for _, p := range all {
		switch p.Kind {
		case guard.Take:
			if p.res[0] != 1 && p.res[0] != 4 {
				break
			}
			if !allowed || (p.res[0] == 4 && !p.Spec.Failures) {
				p.untake()
				break
			}
			n := p.cost
			if p.Spec.Algorithm == guard.Distinct {
				n = 0
				if !p.seen {
					n = 1
				}
			} else if p.Extra > 0 {
				more := min(p.Extra, p.res[1]/4)
				n += more
				p.res[1] -= more
			}
			p.commit(now, n)
			p.res[5] = n
		case guard.Peek:
			if p.res[0] == 1 || p.res[0] == 4 {
				p.untake()
			}
		case guard.Commit:
			// a challenged take whose proof was given: taken whatever the
			// state (the lockout and the limit judged it already)
			ok, rem, reset, _ := p.alg(now, p.cost)
			n := p.cost
			if p.Spec.Algorithm == guard.Distinct {
				n = 0
				if !p.seen {
					n = 1
				}
			}
			p.commit(now, n)
			if !ok {
				rem = 0
			}
			p.res = [6]int64{1, rem, reset, 0, 0, n}
		case guard.Strike:
			switch l := p.lockUntil(now); {
			case l > 0:
				p.res = [6]int64{0, 0, l - now, l - now, 1, 0}
			case p.Spec.Lockout != nil && (p.again(now) || !p.allows(now)):
				// At the limit, or the first failure since a lockout
				// within reset: locked for the next duration.
				d := p.strike(now)
				p.clear()
				p.res = [6]int64{0, 0, d, d, 1, 0}
			default:
				p.res = [6]int64{1}
			}
		case guard.Refund:
			p.refund(now, true)
			p.res = [6]int64{1}
		case guard.Cancel, guard.Release:
			p.refund(now, false)
			p.res = [6]int64{1}
		case guard.Revoke:
			p.st.rv = now
			p.res = [6]int64{1}
		case guard.Unblock:
			p.clear()
			p.st.l, p.st.s, p.st.x = 0, 0, 0
			p.res = [6]int64{1, p.limit}
		case guard.Reserve:
			_, rem, reset, _ := p.tbCheck(now, p.cost)
			wait := max(0, p.allowAt-now)
			if wait <= p.MaxWait.Microseconds() {
				p.tbCommit(now, p.cost)
				p.res = [6]int64{1, max(0, rem), max(0, reset), wait, 0, p.cost}
			} else {
				p.res = [6]int64{0, 0, reset, wait, 0, 0}
			}
		}
		p.st.expires = max(p.st.expires, p.stateEnd(now))
	}
	s.trim(now)

	out := make([]guard.OpResult, len(all))
	t := time.UnixMicro(now)
	for i, p := range all {
		r := p.res
		out[i] = guard.OpResult{
			Allowed: r[0] != 0 && r[0] != 4, Skipped: r[0] == 2, Inapplicable: r[0] == 3, Challenged: r[0] == 4, Remaining: r[1], ResetAfter: us(r[2]), RetryAfter: us(r[3]),
			Locked: r[4] == 1, Taken: r[5], Now: t,
		}
	}
	return out, nil
}

// Len reports how many states the store holds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Begin implements guard.Backstop: the takes count as taken until they
// end.
func (s *Store) Begin(ops []guard.Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock().UnixMicro()
	for _, p := range s.ops(ops, now) {
		if p.Kind == guard.Take {
			p.st.pending += p.cost
			// a take in flight pushes out no entry of a set kept at its
			// limit (End removes the take's own, and the set would be one
			// short of what the store counts)
			if a := p.Spec.Algorithm; a == guard.SlidingLog || a == guard.Distinct {
				p.limit = math.MaxInt64
			}
			p.commit(now, p.cost)
			p.st.expires = max(p.st.expires, p.stateEnd(now))
		}
	}
	s.trim(now)
}

// End implements guard.Backstop: what Begin counted is given back.
func (s *Store) End(ops []guard.Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.end(s.ops(ops, s.clock().UnixMicro()), s.clock().UnixMicro())
}

func (s *Store) end(all []*op, now int64) {
	for _, p := range all {
		if p.Kind == guard.Take && p.st.pending >= p.cost {
			p.st.pending -= p.cost
			p.refund(now, false)
		}
	}
}

// Mirror implements guard.Backstop: each op's state becomes what the
// store answered for it, and the takes still in flight count on top. The store tells how much of the limit is used
// (Remaining), until when (ResetAfter) and whether a lockout runs, not
// how it stores that; each algorithm's state is set to one that answers
// the same now and errs towards denying later (a sliding window keeps
// its count for the whole window; a set keeps placeholder entries for
// values it did not see). Ops the store skipped tell nothing.
func (s *Store) Mirror(ops []guard.Op, res []guard.OpResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock().UnixMicro()
	all := s.ops(ops, now)
	s.end(all, now)
	for i, p := range all {
		r := res[i]
		if r.Skipped || r.Inapplicable {
			continue
		}
		switch p.Kind {
		case guard.Take, guard.Peek:
			p.mirror(r, now)
		case guard.Strike:
			if r.Locked {
				p.clear()
				p.st.l = now + r.RetryAfter.Microseconds()
				p.st.s, p.st.x = max(p.st.s, 1), max(p.st.x, now+p.rst)
			}
		}
		p.st.expires = max(p.st.expires, p.stateEnd(now))
	}
	s.trim(now)
}

// Forget implements guard.Backstop: the state of rule id for subject tag
// is gone (an unblock made through another process).
func (s *Store) Forget(id, tag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.m[tag+"\x00"+id]; st != nil {
		s.remove(st)
	}
}

func (p *op) mirror(r guard.OpResult, now int64) {
	st := p.st
	if r.Locked {
		st.l = now + r.RetryAfter.Microseconds()
		st.s, st.x = max(st.s, 1), max(st.x, now+p.rst)
		return // the count behind a lockout is not told
	}
	st.l = 0
	// what the store counts, and this process's takes still in flight
	used := max(0, p.limit-r.Remaining) + st.pending
	switch p.Spec.Algorithm {
	case guard.FixedWindow:
		st.c, st.e = used, 0
		if r.ResetAfter > 0 && used > 0 {
			st.e = now + min(r.ResetAfter.Microseconds(), p.window)
		} else {
			st.c = 0
		}
	case guard.TokenBucket:
		st.tat = now + p.period()*used
	case guard.SlidingWindow:
		// an elastic rule's verified units are not told: the backstop
		// holds it to its own limit
		st.ws, st.cur, st.prv, st.vc, st.vp = p.ws(now), used, 0, 0, 0
	case guard.Ratio:
		// the counts behind a ratio are not told: a denial is kept as a
		// window of failures only, an admission as a window of this
		// process's attempts in flight
		st.ws, st.pa, st.pf = p.ws(now), 0, 0
		st.ca, st.cf = st.pending, st.pending
		if !r.Allowed {
			st.ca, st.cf = max(p.Spec.Min, 1)+st.pending, max(p.Spec.Min, 1)+st.pending
		}
	case guard.SlidingLog, guard.Concurrency, guard.Distinct:
		score := now
		if p.Spec.Algorithm == guard.Concurrency {
			score = now + p.window
		}
		from := now - p.window
		if p.Spec.Algorithm == guard.Concurrency {
			from = now
		}
		p.prune(from)
		if p.Kind == guard.Take && r.Allowed && r.Taken > 0 && p.Member != "" {
			if p.Spec.Algorithm == guard.Distinct {
				p.zadd(score, p.Member)
			} else {
				for j := int64(1); j <= r.Taken; j++ {
					p.zadd(score, p.Member+":"+strconv.FormatInt(j, 10))
				}
			}
		}
		// as many entries as the store counts: the oldest go first, and
		// placeholders stand for those this process never saw
		for int64(len(st.z)) > used {
			st.z = st.z[1:]
		}
		for i := int64(len(st.z)); i < used; i++ {
			p.zadd(score, "~"+strconv.FormatInt(i, 10))
		}
	}
}

func (p *op) allows(now int64) bool {
	ok, _, _, _ := p.alg(now, 1)
	return ok
}

// again reports a failure within reset of an earlier lockout: it locks
// again at once, for the next duration (a lockout ending does not hand
// out a fresh budget).
func (p *op) again(now int64) bool { return p.st.s > 0 && p.st.x > now }

// nextLockout is how long the next lockout of the subject would last.
func (p *op) nextLockout(now int64) int64 {
	n := int64(1)
	if p.st.x > now {
		n = p.st.s + 1
	}
	return int64(math.Floor(math.Min(float64(p.lockInitial)*math.Pow(p.factor, float64(n-1)), float64(p.lockMax))))
}

// stateEnd is when everything the op's state holds has ended.
func (p *op) stateEnd(now int64) int64 {
	st := p.st
	end := max(st.e, st.tat, st.x, st.l)
	if st.cur > 0 || st.prv > 0 || st.vc > 0 || st.vp > 0 || st.ca > 0 || st.pa > 0 {
		end = max(end, st.ws+2*p.window)
	}
	if st.rv > 0 {
		end = max(end, st.rv+p.window)
	}
	for _, e := range st.z {
		switch p.Spec.Algorithm {
		case guard.Concurrency:
			end = max(end, e.score)
		default:
			end = max(end, e.score+p.window)
		}
	}
	return end
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func us(x int64) time.Duration { return time.Duration(x) * time.Microsecond }

// untake reports what an allowed op leaves when nothing is taken: the
// units back, and the state's end as it stands (0 when empty).
func (p *op) untake() {
	switch {
	case p.res[0] != 1: // challenged: its remaining is the state as it stands
	case p.Spec.Algorithm != guard.Distinct:
		p.res[1] += p.cost
	case !p.seen:
		p.res[1]++
	}
	now, st := p.now, p.st
	switch p.Spec.Algorithm {
	case guard.TokenBucket:
		p.res[2] = max(0, st.tat-now)
	case guard.FixedWindow:
		if st.e > now {
			p.res[2] = min(st.e-now, p.window)
		} else {
			p.res[2] = 0
		}
	case guard.SlidingWindow:
		if cur, prev := p.swCounts(now); cur == 0 && prev == 0 {
			p.res[2] = 0
		}
	case guard.Ratio:
		if ca, _, pa, _ := p.rtCounts(now); ca == 0 && pa == 0 {
			p.res[2] = 0
		}
	default:
		from := now - p.window
		if p.Spec.Algorithm == guard.Concurrency {
			from = now
		}
		if !p.seen && p.zCount(from) == 0 {
			p.res[2] = 0
		}
	}
}

func (p *op) lockUntil(now int64) int64 {
	if p.Spec.Lockout != nil && p.st.l > now {
		return p.st.l
	}
	return 0
}

func (p *op) check(now, cost int64) (bool, int64, int64, int64, bool) {
	if l := p.lockUntil(now); l > 0 {
		return false, 0, l - now, l - now, true
	}
	ok, rem, reset, retry := p.alg(now, cost)
	if !ok && p.Spec.Lockout != nil {
		// At its limit, a rule with a lockout is about to lock (the
		// failures in flight strike it): the wait is the lockout's, not
		// the rest of the window.
		retry = min(retry, p.nextLockout(now))
	}
	return ok, rem, reset, retry, false
}

func (p *op) strike(now int64) int64 {
	st := p.st
	n := int64(1)
	if st.x > now {
		n = st.s + 1
	}
	d := p.nextLockout(now)
	st.l, st.s, st.x = now+d, n, now+p.rst
	return d
}

// The algorithms, as otpguard.lua has them.

func (p *op) alg(now, cost int64) (bool, int64, int64, int64) {
	switch p.Spec.Algorithm {
	case guard.FixedWindow:
		return p.fwCheck(now, cost)
	case guard.TokenBucket:
		return p.tbCheck(now, cost)
	case guard.SlidingWindow:
		return p.swCheck(now, cost)
	case guard.Ratio:
		return p.rtCheck(now, cost)
	case guard.SlidingLog:
		return p.zCheck(now, cost, now-p.window, func(s int64) int64 { return s + p.window - now })
	case guard.Concurrency:
		return p.zCheck(now, cost, now, func(s int64) int64 { return s - now })
	case guard.Distinct:
		from := now - p.window
		if i := p.find(p.Member); i >= 0 && p.st.z[i].score > from {
			p.seen = true
			return true, max(0, p.limit-p.zCount(from)), p.window, 0
		}
		return p.zCheck(now, 1, from, func(s int64) int64 { return s + p.window - now })
	}
	return false, 0, 0, 0
}

func (p *op) commit(now, n int64) {
	st := p.st
	switch p.Spec.Algorithm {
	case guard.FixedWindow:
		if st.e <= now {
			st.c, st.e = 0, now+p.window
		}
		st.c += n
	case guard.TokenBucket:
		p.tbCommit(now, n)
	case guard.SlidingWindow:
		p.swRead(now)
		st.cur += n
		st.ws = p.ws(now)
	case guard.Ratio:
		p.rtRead(now)
		st.ca += n
		st.cf += n
	case guard.SlidingLog:
		p.prune(now - p.window)
		for j := int64(1); j <= n; j++ {
			p.zadd(now, p.Member+":"+strconv.FormatInt(j, 10))
		}
		p.trim()
	case guard.Concurrency:
		p.prune(now)
		for j := int64(1); j <= n; j++ {
			p.zadd(now+p.window, p.Member+":"+strconv.FormatInt(j, 10))
		}
	case guard.Distinct:
		p.prune(now - p.window)
		p.zadd(now, p.Member)
		p.trim()
	}
}

// refund gives back what a take counted: as a success (a ratio keeps the
// attempt, an elastic rule counts the units verified), or else as if it
// never happened.
func (p *op) refund(now int64, success bool) {
	st := p.st
	switch p.Spec.Algorithm {
	case guard.FixedWindow:
		at := p.At.UnixMicro()
		if p.At.IsZero() {
			at = 0
		}
		if st.e <= now || (at > 0 && at < st.e-p.window-guard.FixedWindowSlack.Microseconds()) {
			return
		}
		st.c = max(0, st.c-p.cost)
		if st.c == 0 {
			st.e = 0 // back to zero, the window ends: the next hit starts one
		}
	case guard.TokenBucket:
		tat := max(st.tat, now)
		st.tat = tat - p.period()*p.cost
	case guard.SlidingWindow:
		p.swRead(now)
		at := now
		if !p.At.IsZero() {
			at = p.At.UnixMicro()
		}
		ws := at - mod(at, p.window)
		switch ws {
		case p.ws(now):
			st.cur = max(0, st.cur-p.cost)
		case p.ws(now) - p.window:
			st.prv = max(0, st.prv-p.cost)
		}
		if p.Spec.Elastic > 0 && success {
			st.vc += p.cost
		}
		st.ws = p.ws(now)
	case guard.Ratio:
		p.rtRead(now)
		at := now
		if !p.At.IsZero() {
			at = p.At.UnixMicro()
		}
		switch at - mod(at, p.window) {
		case p.ws(now):
			st.cf = max(0, st.cf-p.cost)
			if !success {
				st.ca = max(0, st.ca-p.cost)
			}
		case p.ws(now) - p.window:
			st.pf = max(0, st.pf-p.cost)
			if !success {
				st.pa = max(0, st.pa-p.cost)
			}
		}
	case guard.SlidingLog, guard.Concurrency:
		for j := int64(1); j <= p.cost; j++ {
			p.zrem(p.Member + ":" + strconv.FormatInt(j, 10))
		}
	case guard.Distinct:
		p.zrem(p.Member)
	}
}

func (p *op) clear() {
	st := p.st
	st.c, st.e, st.tat, st.ws, st.cur, st.prv, st.z = 0, 0, 0, 0, 0, 0, nil
	st.vc, st.vp, st.ca, st.cf, st.pa, st.pf = 0, 0, 0, 0, 0, 0
}

func (p *op) fwCheck(now, cost int64) (bool, int64, int64, int64) {
	c, e := p.st.c, p.st.e
	if e <= now {
		c, e = 0, 0
	}
	// a window never ends more than one window from now (as the Lua
	// library has it, for clocks that callers pass)
	left := min(e-now, p.window)
	reset := p.window
	if e > 0 {
		reset = left
	}
	if c+cost <= p.limit {
		return true, p.limit - c - cost, reset, 0
	}
	if e == 0 {
		reset = 0
	}
	retry := p.window
	if e > 0 {
		retry = left
	}
	return false, max(0, p.limit-c), reset, retry
}

func (p *op) period() int64 { return (p.window + p.limit - 1) / p.limit }

func (p *op) tbCheck(now, cost int64) (bool, int64, int64, int64) {
	tat := max(p.st.tat, now)
	t, tau := p.period(), p.period()*p.limit
	p.allowAt = tat + t*cost - tau
	if now >= p.allowAt {
		return true, (now - p.allowAt) / t, tat + t*cost - now, 0
	}
	return false, max(0, floorDiv(now-tat+tau, t)), tat - now, p.allowAt - now
}

func (p *op) tbCommit(now, n int64) {
	p.st.tat = max(p.st.tat, now) + p.period()*n
}

func (p *op) ws(now int64) int64 { return now - mod(now, p.window) }

// swRead brings cur and prev (and the verified units) to the window of
// now.
func (p *op) swRead(now int64) {
	st, ws := p.st, p.ws(now)
	switch st.ws {
	case ws:
	case ws - p.window:
		st.cur, st.prv, st.vc, st.vp = 0, st.cur, 0, st.vc
	default:
		st.cur, st.prv, st.vc, st.vp = 0, 0, 0, 0
	}
	st.ws = ws
}

// swLimit is the rule's limit, or an elastic rule's: max(limit, ratio ×
// the verified units in the sliding window), as the Lua library has it.
func (p *op) swLimit(now int64) int64 {
	if p.Spec.Elastic == 0 {
		return p.limit
	}
	var vc, vp int64
	switch ws := p.ws(now); p.st.ws {
	case ws:
		vc, vp = p.st.vc, p.st.vp
	case ws - p.window:
		vp = p.st.vc
	}
	s := float64(vc) + float64(vp)*float64(p.window-(now-p.ws(now)))/float64(p.window)
	return max(p.limit, int64(math.Floor(p.Spec.Elastic*s)))
}

// rtRead brings a ratio's counts to the window of now.
func (p *op) rtRead(now int64) {
	st, ws := p.st, p.ws(now)
	switch st.ws {
	case ws:
	case ws - p.window:
		st.ca, st.cf, st.pa, st.pf = 0, 0, st.ca, st.cf
	default:
		st.ca, st.cf, st.pa, st.pf = 0, 0, 0, 0
	}
	st.ws = ws
}

// rtCounts are a ratio's counts at now.
func (p *op) rtCounts(now int64) (ca, cf, pa, pf int64) {
	switch ws := p.ws(now); p.st.ws {
	case ws:
		return p.st.ca, p.st.cf, p.st.pa, p.st.pf
	case ws - p.window:
		return 0, 0, p.st.ca, p.st.cf
	}
	return 0, 0, 0, 0
}

// rtCheck is the ratio algorithm, in floating point as the Lua library
// computes it (rt_room, rt_retry): whole percents, and the thresholds on
// the previous window's weight as fractions of whole numbers.
func (p *op) rtCheck(now, cost int64) (bool, int64, int64, int64) {
	ca, cf, pa, pf := p.rtCounts(now)
	ws := p.ws(now)
	elapsed := now - ws
	win, left := float64(p.window), float64(p.window-elapsed)
	a, f := float64(ca)+float64(pa)*left/win, float64(cf)+float64(pf)*left/win
	pct, mn := float64(p.limit), float64(p.Spec.Min)
	x := math.Max(mn-a, (pct*a-100*f)/(100-pct))
	if x > float64(cost-1) {
		return true, int64(math.Max(0, math.Ceil(x)-float64(cost))), ws + 2*p.window - now, 0
	}
	var reset int64
	if ca > 0 {
		reset = ws + 2*p.window - now
	} else if pa > 0 {
		reset = ws + p.window - now
	}
	// n / d: the weight of the previous window below which an attempt is
	// admitted (d > 0); none yet
	n, d := -1.0, 1.0
	if pa > 0 {
		n, d = mn-float64(ca), float64(pa)
	}
	if e := pct*float64(pa) - 100*float64(pf); e < 0 {
		n2, d2 := pct*float64(ca)-100*float64(cf), -e
		if n2*d > n*d2 {
			n, d = n2, d2
		}
	}
	if n > 0 && n*win <= d*left {
		return false, 0, reset, int64(left - math.Ceil(n*win/d) + 1)
	}
	if ca <= 0 {
		return false, 0, reset, p.window - elapsed
	}
	t := left + win - math.Ceil(mn*win/float64(ca)) + 1
	return false, 0, reset, min(int64(t), 2*p.window-elapsed)
}

// swCounts are the current and previous windows' counts at now.
func (p *op) swCounts(now int64) (cur, prev int64) {
	switch ws := p.ws(now); p.st.ws {
	case ws:
		return p.st.cur, p.st.prv
	case ws - p.window:
		return 0, p.st.cur
	}
	return 0, 0
}

func (p *op) swCheck(now, cost int64) (bool, int64, int64, int64) {
	win, limit := p.window, p.swLimit(now)
	ws := p.ws(now)
	cur, prev := p.swCounts(now)
	elapsed := now - ws
	// in floating point, as the Lua library computes it (its numbers are
	// doubles): an int64 product overflows past 3.6M units on a 30-day window
	est := cur + int64(math.Ceil(float64(prev)*float64(win-elapsed)/float64(win)))
	decay := func(n, need int64) int64 {
		if need < 0 {
			return 2 * win
		}
		if n <= need {
			return 0
		}
		e := int64(math.Ceil(float64(win) - float64(need)*float64(win)/float64(n)))
		return min(max(e, 0), win)
	}
	if est+cost <= limit {
		return true, limit - est - cost, ws + 2*win - now, 0
	}
	var reset, retry int64
	if cur+cost > limit {
		retry = (win - elapsed) + decay(cur, limit-cost)
	} else {
		retry = max(1, decay(prev, limit-cost-cur)-elapsed)
	}
	if cur > 0 {
		reset = ws + 2*win - now
	} else if prev > 0 {
		reset = ws + win - now
	}
	return false, max(0, limit-est), reset, retry
}

// The sorted sets: z is kept ordered by (score, member), as Redis does.

func (p *op) zCount(from int64) int64 {
	var n int64
	for _, e := range p.st.z {
		if e.score > from {
			n++
		}
	}
	return n
}

func (p *op) zCheck(now, cost, from int64, liveFor func(int64) int64) (bool, int64, int64, int64) {
	count := p.zCount(from)
	if count+cost <= p.limit {
		return true, p.limit - count - cost, p.window, 0
	}
	var live []entry
	for _, e := range p.st.z {
		if e.score > from {
			live = append(live, e)
		}
	}
	reset, retry := int64(0), p.window
	if len(live) > 0 {
		reset = liveFor(live[len(live)-1].score)
	}
	if cost <= p.limit {
		retry = max(1, liveFor(live[count+cost-p.limit-1].score))
	}
	return false, max(0, p.limit-count), reset, retry
}

func (p *op) find(member string) int {
	for i, e := range p.st.z {
		if e.member == member {
			return i
		}
	}
	return -1
}

func (p *op) zadd(score int64, member string) {
	p.zrem(member)
	z := append(p.st.z, entry{score, member})
	sort.Slice(z, func(i, j int) bool {
		if z[i].score != z[j].score {
			return z[i].score < z[j].score
		}
		return z[i].member < z[j].member
	})
	p.st.z = z
}

func (p *op) zrem(member string) {
	if i := p.find(member); i >= 0 {
		p.st.z = append(p.st.z[:i], p.st.z[i+1:]...)
	}
}

// prune removes the entries scored at or below to.
func (p *op) prune(to int64) {
	z := p.st.z[:0]
	for _, e := range p.st.z {
		if e.score > to {
			z = append(z, e)
		}
	}
	p.st.z = z
}

// trim keeps the highest-scored entries: the limit, or for a distinct
// set its Keep when that is more.
func (p *op) trim() {
	keep := p.limit
	if p.Spec.Algorithm == guard.Distinct {
		keep = max(keep, p.Spec.Keep)
	}
	if n := int64(len(p.st.z)); n > keep {
		p.st.z = p.st.z[n-keep:]
	}
}

func mod(a, b int64) int64 {
	r := a % b
	if r < 0 {
		r += b
	}
	return r
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
