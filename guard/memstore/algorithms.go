// The algorithms, as otpguard.lua has them. The sorted sets: z is kept
// ordered by (score, member), as Redis does.

package memstore

import (
	"math"
	"sort"

	"github.com/otpguard/otpguard/guard/store"
)

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
	if p.Spec.Algorithm == store.Distinct {
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
