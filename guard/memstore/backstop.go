package memstore

import (
	"math"
	"strconv"

	"github.com/otpguard/otpguard/guard/store"
)

// Begin implements store.Backstop: the takes count as taken until they
// end.
func (s *Store) Begin(ops []store.Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock().UnixMicro()
	for _, p := range s.ops(ops, now) {
		if p.Kind == store.Take {
			p.st.pending += p.cost
			// a take in flight pushes out no entry of a set kept at its
			// limit (End removes the take's own, and the set would be one
			// short of what the store counts)
			if a := p.Spec.Algorithm; a == store.SlidingLog || a == store.Distinct {
				p.limit = math.MaxInt64
			}
			p.commit(now, p.cost)
			p.st.expires = max(p.st.expires, p.stateEnd(now))
		}
	}
	s.trim(now)
}

// End implements store.Backstop: what Begin counted is given back.
func (s *Store) End(ops []store.Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.end(s.ops(ops, s.clock().UnixMicro()), s.clock().UnixMicro())
}

func (s *Store) end(all []*op, now int64) {
	for _, p := range all {
		if p.Kind == store.Take && p.st.pending >= p.cost {
			p.st.pending -= p.cost
			p.refund(now, false)
		}
	}
}

// Mirror implements store.Backstop: each op's state becomes what the
// store answered for it, and the takes still in flight count on top. The store tells how much of the limit is used
// (Remaining), until when (ResetAfter) and whether a lockout runs, not
// how it stores that; each algorithm's state is set to one that answers
// the same now and errs towards denying later (a sliding window keeps
// its count for the whole window; a set keeps placeholder entries for
// values it did not see). Ops the store skipped tell nothing.
func (s *Store) Mirror(ops []store.Op, res []store.OpResult) {
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
		case store.Take, store.Peek:
			p.mirror(r, now)
		case store.Strike:
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

// Forget implements store.Backstop: the state of rule id for subject tag
// is gone (an unblock made through another process).
func (s *Store) Forget(id, tag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.m[tag+"\x00"+id]; st != nil {
		s.remove(st)
	}
}

func (p *op) mirror(r store.OpResult, now int64) {
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
	case store.FixedWindow:
		st.c, st.e = used, 0
		if r.ResetAfter > 0 && used > 0 {
			st.e = now + min(r.ResetAfter.Microseconds(), p.window)
		} else {
			st.c = 0
		}
	case store.TokenBucket:
		st.tat = now + p.period()*used
	case store.SlidingWindow:
		// an elastic rule's verified units are not told: the backstop
		// holds it to its own limit
		st.ws, st.cur, st.prv, st.vc, st.vp = p.ws(now), used, 0, 0, 0
	case store.Ratio:
		// the counts behind a ratio are not told: a denial is kept as a
		// window of failures only, an admission as a window of this
		// process's attempts in flight
		st.ws, st.pa, st.pf = p.ws(now), 0, 0
		st.ca, st.cf = st.pending, st.pending
		if !r.Allowed {
			st.ca, st.cf = max(p.Spec.Min, 1)+st.pending, max(p.Spec.Min, 1)+st.pending
		}
	case store.SlidingLog, store.Concurrency, store.Distinct:
		p.mirrorLog(r, now, used)
	}
}

// mirrorLog mirrors a log of members (sliding log, concurrency, distinct):
// this take's members added, and as many entries as the store counts.
func (p *op) mirrorLog(r store.OpResult, now, used int64) {
	st := p.st
	score := now
	if p.Spec.Algorithm == store.Concurrency {
		score = now + p.window
	}
	from := now - p.window
	if p.Spec.Algorithm == store.Concurrency {
		from = now
	}
	p.prune(from)
	// an admitted take's entries (a value seen again takes nothing, and
	// is refreshed: its window starts again, as in the store)
	if p.Kind == store.Take && r.Allowed && p.Member != "" {
		if p.Spec.Algorithm == store.Distinct {
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
	// (each under a name none of the entries holds: a placeholder
	// kept from an earlier mirror is not replaced by its namesake)
	for i := int64(0); int64(len(st.z)) < used; i++ {
		if m := "~" + strconv.FormatInt(i, 10); p.find(m) < 0 {
			p.zadd(score, m)
		}
	}
}
