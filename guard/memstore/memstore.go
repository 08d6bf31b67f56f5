// Package memstore is a store.Store in this process's memory: the backstop
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
	"sync"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// MaxEntries is the default bound on the (rule, subject) states a Store
// keeps.
const MaxEntries = 100_000

// Store is the in-memory store.Store. Its zero value is not usable; call New.
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

var _ store.Backstop = (*Store)(nil)

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
	*store.Op
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

func key(o *store.Op) string { return o.Tag + "\x00" + o.Spec.ID }

func (s *Store) ops(ops []store.Op, now int64) []*op {
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

// Do implements store.Store.
func (s *Store) Do(_ context.Context, ops []store.Op) ([]store.OpResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock().UnixMicro()
	all := s.ops(ops, now)

	allowed := check(all, now)
	for _, p := range all {
		p.write(now, allowed)
		p.st.expires = max(p.st.expires, p.stateEnd(now))
	}
	s.trim(now)
	return results(all, now), nil
}

// check judges the batch's device checks, takes and peeks in order
// (under the store's lock): each op's answer goes to its res; the result
// is whether no enforcing rule denied.
func check(all []*op, now int64) (allowed bool) {
	allowed, trusted := true, false
	for _, p := range all {
		if p.Kind == store.DeviceCheck {
			trusted = p.At.UnixMicro() > p.st.rv && now < p.At.UnixMicro()+p.window
			p.res = [6]int64{b2i(trusted)}
			continue
		}
		if p.Kind != store.Take && p.Kind != store.Peek {
			continue
		}
		if p.Cond != store.Always && (p.Cond == store.CondTrusted) != trusted {
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
	return allowed
}

// write makes the op's change to its state once the batch is judged
// (allowed: no enforcing rule denied), and sets its answer.
func (p *op) write(now int64, allowed bool) {
	switch p.Kind {
	case store.Take:
		p.writeTake(now, allowed)
	case store.Peek:
		if p.res[0] == 1 || p.res[0] == 4 {
			p.untake()
		}
	case store.Commit:
		p.writeCommit(now)
	case store.Strike:
		p.writeStrike(now)
	case store.Refund:
		p.refund(now, true)
		p.res = [6]int64{1}
	case store.Cancel, store.Release:
		p.refund(now, false)
		p.res = [6]int64{1}
	case store.Revoke:
		p.st.rv = max(now, p.st.rv+1) // never back (see the library's 'D')
		p.res = [6]int64{1}
	case store.Unblock:
		p.clear()
		p.st.l, p.st.s, p.st.x = 0, 0, 0
		p.res = [6]int64{1, p.limit}
	case store.Reserve:
		p.writeReserve(now)
	}
}

// writeTake counts a take that was allowed or challenged, if the batch
// was allowed (a challenged take only on a failure-counting rule): its
// cost, one for a new distinct member, plus the extra it may have.
func (p *op) writeTake(now int64, allowed bool) {
	if p.res[0] != 1 && p.res[0] != 4 {
		return
	}
	if !allowed || (p.res[0] == 4 && !p.Spec.Failures) {
		p.untake()
		return
	}
	n := p.cost
	if p.Spec.Algorithm == store.Distinct {
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
}

// writeCommit takes a challenged take whose proof was given: taken
// whatever the state (the lockout and the limit judged it already).
func (p *op) writeCommit(now int64) {
	ok, rem, reset, _ := p.alg(now, p.cost)
	n := p.cost
	if p.Spec.Algorithm == store.Distinct {
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
}

// writeStrike counts a failure: still locked, newly locked, or neither.
func (p *op) writeStrike(now int64) {
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
}

// writeReserve books a token bucket's next slot when its wait is within
// the op's MaxWait.
func (p *op) writeReserve(now int64) {
	_, rem, reset, _ := p.tbCheck(now, p.cost)
	wait := max(0, p.allowAt-now)
	if wait <= p.MaxWait.Microseconds() {
		p.tbCommit(now, p.cost)
		p.res = [6]int64{1, max(0, rem), max(0, reset), wait, 0, p.cost}
	} else {
		p.res = [6]int64{0, 0, reset, wait, 0, 0}
	}
}

// results turns the ops' answers into the store's.
func results(all []*op, now int64) []store.OpResult {
	out := make([]store.OpResult, len(all))
	t := time.UnixMicro(now)
	for i, p := range all {
		r := p.res
		out[i] = store.OpResult{
			Allowed: r[0] != 0 && r[0] != 4, Skipped: r[0] == 2, Inapplicable: r[0] == 3, Challenged: r[0] == 4, Remaining: r[1], ResetAfter: us(r[2]), RetryAfter: us(r[3]),
			Locked: r[4] == 1, Taken: r[5], Now: t,
		}
	}
	return out
}

// Len reports how many states the store holds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
