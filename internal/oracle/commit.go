package oracle

import (
	"fmt"
	"math/big"
	"strconv"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

func (r rule) commit(t int64, op *store.Op, n int64) {
	st := r.st
	switch r.spec.Algorithm {
	case store.FixedWindow:
		if !r.fwLive(t) {
			st.fwStart, st.fwCount = t, 0
		}
		st.fwCount += n
	case store.TokenBucket:
		st.credit, st.creditAt, st.full = r.tbCredit(t)-n*r.period(), t, false
	case store.SlidingWindow:
		idx, _ := r.windowOf(t)
		st.count[idx] += n
	case store.Ratio:
		idx, _ := r.windowOf(t)
		st.attempts[idx] += n
		st.failures[idx] += n
	case store.SlidingLog:
		for j := int64(1); j <= n; j++ {
			st.entries = append(st.entries, entry{op.Member + ":" + strconv.FormatInt(j, 10), t})
		}
	case store.Concurrency:
		for j := int64(1); j <= n; j++ {
			st.entries = append(st.entries, entry{op.Member + ":" + strconv.FormatInt(j, 10), t + r.win})
		}
	case store.Distinct:
		if i := r.find(op.Member); i >= 0 {
			st.entries[i].at = t // last seen
		} else {
			st.entries = append(st.entries, entry{op.Member, t})
		}
	}
}

// giveBack undoes a take of op.Cost units made at op.At (zero: now): as
// a success, or (cancel, release) as if it never happened.
func (r rule) giveBack(t int64, op *store.Op, success bool) {
	st := r.st
	at := t
	if !op.At.IsZero() {
		at = op.At.UnixMicro()
	}
	switch r.spec.Algorithm {
	case store.FixedWindow:
		// only a take of the window that runs (a take of an earlier one
		// is gone with it); at zero, the window that runs
		if !r.fwLive(t) || (!op.At.IsZero() && at < st.fwStart-store.FixedWindowSlack.Microseconds()) {
			return
		}
		st.fwCount = max(0, st.fwCount-op.Cost)
		if st.fwCount == 0 {
			st.fwStart = -1 // back to nothing: the next hit starts a window
		}
	case store.TokenBucket:
		full := r.period() * r.spec.Limit
		st.credit, st.creditAt = min(full, r.tbCredit(t)+op.Cost*r.period()), t
	case store.SlidingWindow:
		idx, _ := r.windowOf(t)
		if w, _ := r.windowOf(at); w == idx || w == idx-1 {
			st.count[w] = max(0, st.count[w]-op.Cost)
		}
		if success && r.spec.Elastic > 0 {
			st.verified[idx] += op.Cost // verified now
		}
	case store.Ratio:
		idx, _ := r.windowOf(t)
		if w, _ := r.windowOf(at); w == idx || w == idx-1 {
			st.failures[w] = max(0, st.failures[w]-op.Cost)
			if !success {
				st.attempts[w] = max(0, st.attempts[w]-op.Cost)
			}
		}
	case store.SlidingLog, store.Concurrency:
		for j := int64(1); j <= op.Cost; j++ {
			if i := r.find(op.Member + ":" + strconv.FormatInt(j, 10)); i >= 0 {
				st.entries = append(st.entries[:i], st.entries[i+1:]...)
			}
		}
	case store.Distinct:
		if i := r.find(op.Member); i >= 0 {
			st.entries = append(st.entries[:i], st.entries[i+1:]...)
		}
	}
}

// --- lockouts

// nextLockout is how long the subject's next lockout lasts: the n-th
// within reset of the last lasts initial × factor^(n-1), at most max.
func (r rule) nextLockout(t int64) (n, d int64) {
	n = 1
	if r.st.strikesUntil > t {
		n = r.st.strike + 1
	}
	l := r.spec.Lockout
	x := rat(us(l.Initial))
	for range n - 1 {
		x = mul(x, new(big.Rat).SetFloat64(l.Factor))
		if x.Cmp(rat(us(l.Max))) > 0 {
			break
		}
	}
	if x.Cmp(rat(us(l.Max))) > 0 {
		x = rat(us(l.Max))
	}
	return n, floor(x)
}

func (r rule) locked(t int64) bool { return r.spec.Lockout != nil && r.st.lockedUntil > t }

// --- the batch

// rules finds each op's rule state, made afresh for a tag and rule not
// seen before; ops of a kind the oracle does not model are an error.
func (s *Store) rules(ops []store.Op) ([]rule, error) {
	rules := make([]rule, len(ops))
	for i := range ops {
		op := &ops[i]
		if op.Spec.Challenge || op.Extra > 0 || op.Cond != store.Always ||
			op.Kind == store.Reserve || op.Kind == store.DeviceCheck || op.Kind == store.Revoke {
			return nil, fmt.Errorf("oracle: %s ops of this kind are not modelled", op.Kind)
		}
		key := op.Tag + "\x00" + op.Spec.ID
		if s.states[key] == nil {
			s.states[key] = newState()
		}
		rules[i] = rule{spec: op.Spec, st: s.states[key], win: us(op.Spec.Window)}
	}
	return rules, nil
}

// check answers a take or peek at now without writing: locked, allowed
// with the room left (ok: it may take), or denied with how long to wait.
func (r rule) check(now int64, t time.Time, op *store.Op) (res store.OpResult, ok bool) {
	if r.locked(now) {
		w := time.Duration(r.st.lockedUntil-now) * time.Microsecond
		res = store.OpResult{Locked: true, RetryAfter: w, Now: t}
	} else if need := r.need(now, op); r.room(now) >= need {
		ok = true
		res = store.OpResult{Allowed: true, Remaining: r.room(now), Now: t}
	} else {
		wait := r.wait(now, op.Cost)
		if r.spec.Lockout != nil {
			// at its limit, a rule with a lockout is about to lock
			// (the failures in flight strike it): the lockout's wait
			_, d := r.nextLockout(now)
			wait = min(wait, d)
		}
		res = store.OpResult{Remaining: r.room(now), RetryAfter: time.Duration(wait) * time.Microsecond, Now: t}
	}
	return res, ok
}

// write makes op's change to the rule's state once the batch is checked:
// a take that may (take: it was ok and the batch allowed) counts, a
// strike may lock, refunds, cancels, releases and unblocks give back.
func (r rule) write(now int64, t time.Time, op *store.Op, res *store.OpResult, take bool) {
	switch op.Kind {
	case store.Take:
		if take {
			n := r.need(now, op)
			r.commit(now, op, n)
			res.Remaining -= n
			res.Taken = n
		}
	case store.Strike:
		switch {
		case r.locked(now):
			w := time.Duration(r.st.lockedUntil-now) * time.Microsecond
			*res = store.OpResult{Locked: true, RetryAfter: w, ResetAfter: w, Now: t}
		case r.spec.Lockout != nil && ((r.st.strike > 0 && r.st.strikesUntil > now) || r.room(now) < r.need(now, &store.Op{Cost: 1, Member: op.Member})):
			// the first failure within reset of a lockout, or one at
			// the limit: locked for the next duration, counted afresh
			n, d := r.nextLockout(now)
			r.st.lockedUntil, r.st.strike, r.st.strikesUntil = now+d, n, now+us(r.spec.Lockout.Reset)
			r.st.clear()
			w := time.Duration(d) * time.Microsecond
			*res = store.OpResult{Locked: true, RetryAfter: w, ResetAfter: w, Now: t}
		default:
			*res = store.OpResult{Allowed: true, Now: t}
		}
	case store.Refund:
		r.giveBack(now, op, true)
		*res = store.OpResult{Allowed: true, Now: t}
	case store.Cancel, store.Release:
		r.giveBack(now, op, false)
		*res = store.OpResult{Allowed: true, Now: t}
	case store.Unblock:
		r.st.clear()
		r.st.lockedUntil, r.st.strike, r.st.strikesUntil = 0, 0, 0
		*res = store.OpResult{Allowed: true, Remaining: r.spec.Limit, Now: t}
	}
}
