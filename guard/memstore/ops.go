package memstore

import (
	"math"
	"strconv"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

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
		case store.Concurrency:
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
	case p.Spec.Algorithm != store.Distinct:
		p.res[1] += p.cost
	case !p.seen:
		p.res[1]++
	}
	now, st := p.now, p.st
	switch p.Spec.Algorithm {
	case store.TokenBucket:
		p.res[2] = max(0, st.tat-now)
	case store.FixedWindow:
		if st.e > now {
			p.res[2] = min(st.e-now, p.window)
		} else {
			p.res[2] = 0
		}
	case store.SlidingWindow:
		if cur, prev := p.swCounts(now); cur == 0 && prev == 0 {
			p.res[2] = 0
		}
	case store.Ratio:
		if ca, _, pa, _ := p.rtCounts(now); ca == 0 && pa == 0 {
			p.res[2] = 0
		}
	default:
		from := now - p.window
		if p.Spec.Algorithm == store.Concurrency {
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

func (p *op) alg(now, cost int64) (bool, int64, int64, int64) {
	switch p.Spec.Algorithm {
	case store.FixedWindow:
		return p.fwCheck(now, cost)
	case store.TokenBucket:
		return p.tbCheck(now, cost)
	case store.SlidingWindow:
		return p.swCheck(now, cost)
	case store.Ratio:
		return p.rtCheck(now, cost)
	case store.SlidingLog:
		return p.zCheck(now, cost, now-p.window, func(s int64) int64 { return s + p.window - now })
	case store.Concurrency:
		return p.zCheck(now, cost, now, func(s int64) int64 { return s - now })
	case store.Distinct:
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
	case store.FixedWindow:
		if st.e <= now {
			st.c, st.e = 0, now+p.window
		}
		st.c += n
	case store.TokenBucket:
		p.tbCommit(now, n)
	case store.SlidingWindow:
		p.swRead(now)
		st.cur += n
		st.ws = p.ws(now)
	case store.Ratio:
		p.rtRead(now)
		st.ca += n
		st.cf += n
	case store.SlidingLog:
		p.prune(now - p.window)
		for j := int64(1); j <= n; j++ {
			p.zadd(now, p.Member+":"+strconv.FormatInt(j, 10))
		}
		p.trim()
	case store.Concurrency:
		p.prune(now)
		for j := int64(1); j <= n; j++ {
			p.zadd(now+p.window, p.Member+":"+strconv.FormatInt(j, 10))
		}
	case store.Distinct:
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
	case store.FixedWindow:
		p.refundFixed(now)
	case store.TokenBucket:
		tat := max(st.tat, now)
		st.tat = tat - p.period()*p.cost
	case store.SlidingWindow:
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
	case store.Ratio:
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
	case store.SlidingLog, store.Concurrency:
		for j := int64(1); j <= p.cost; j++ {
			p.zrem(p.Member + ":" + strconv.FormatInt(j, 10))
		}
	case store.Distinct:
		p.zrem(p.Member)
	}
}

// refundFixed gives a fixed window's units back, unless the window they
// were taken in (at p.At, with the slack) has ended.
func (p *op) refundFixed(now int64) {
	st := p.st
	at := p.At.UnixMicro()
	if p.At.IsZero() {
		at = 0
	}
	if st.e <= now || (at > 0 && at < st.e-p.window-store.FixedWindowSlack.Microseconds()) {
		return
	}
	st.c = max(0, st.c-p.cost)
	if st.c == 0 {
		st.e = 0 // back to zero, the window ends: the next hit starts one
	}
}

func (p *op) clear() {
	st := p.st
	st.c, st.e, st.tat, st.ws, st.cur, st.prv, st.z = 0, 0, 0, 0, 0, 0, nil
	st.vc, st.vp, st.ca, st.cf, st.pa, st.pf = 0, 0, 0, 0, 0, 0
}
