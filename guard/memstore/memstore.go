// Package memstore is a guard.Store in this process's memory: the backstop
// that limits each process on its own while Redis fails (rules with
// onStoreError: allow). It implements every algorithm, lockout and
// operation kind of the Redis library (redisstore's otpguard.lua) with the
// same semantics; a test drives both through the same operations at fixed
// instants and compares every result.
//
// Its state is bounded: expired state is swept as it goes, and when
// MaxEntries subjects are held, the oldest are forgotten (a forgotten
// subject starts afresh: the backstop is a last line, not an exact one).
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

// MaxEntries bounds how many (rule, subject) states a Store keeps.
const MaxEntries = 100_000

// Store is the in-memory guard.Store. Its zero value is not usable; call New.
type Store struct {
	clock func() time.Time
	mu    sync.Mutex
	m     map[string]*state
	ops   int
}

// New returns an empty Store reading time from clock (time.Now when nil).
func New(clock func() time.Time) *Store {
	if clock == nil {
		clock = time.Now
	}
	return &Store{clock: clock, m: map[string]*state{}}
}

var _ guard.Store = (*Store)(nil)

type entry struct {
	score  int64
	member string
}

// state is one rule's state for one subject; each algorithm uses its part.
type state struct {
	c, e          int64   // fixed_window: count, window end
	tat           int64   // token_bucket
	ws, cur, prev int64   // sliding_window
	z             []entry // sliding_log, concurrency, distinct: by score
	l, s, x       int64   // lockout: locked until, strikes, strikes forgotten at
	expires       int64   // when all of it is gone
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
}

// Do implements guard.Store.
func (s *Store) Do(_ context.Context, ops []guard.Op) ([]guard.OpResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock().UnixMicro()
	s.sweep(now, len(ops))

	all := make([]*op, len(ops))
	for i := range ops {
		o := &ops[i]
		key := o.Tag + "\x00" + o.Spec.ID
		st := s.m[key]
		if st == nil {
			st = &state{}
			s.m[key] = st
		}
		p := &op{Op: o, st: st, limit: o.Spec.Limit, window: o.Spec.Window.Microseconds(), cost: o.Cost}
		if l := o.Spec.Lockout; l != nil {
			p.lockInitial, p.factor, p.lockMax, p.rst = l.Initial.Microseconds(), l.Factor, l.Max.Microseconds(), l.Reset.Microseconds()
		}
		all[i] = p
	}

	allowed := true
	for _, p := range all {
		if p.Kind != guard.Take && p.Kind != guard.Peek {
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
			allowed = false
		}
	}

	for _, p := range all {
		switch p.Kind {
		case guard.Take:
			if p.res[0] != 1 {
				break
			}
			if !allowed {
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
			if p.res[0] == 1 {
				p.untake()
			}
		case guard.Strike:
			if l := p.lockUntil(now); l > 0 {
				p.res = [6]int64{0, 0, l - now, l - now, 1, 0}
			} else if ok, _, _, _ := p.alg(now, 1); p.Spec.Lockout != nil && !ok {
				d := p.strike(now)
				p.clear()
				p.res = [6]int64{0, 0, d, d, 1, 0}
			} else {
				p.res = [6]int64{1}
			}
		case guard.Refund, guard.Release:
			p.refund(now)
			p.res = [6]int64{1}
		case guard.Clear:
			p.clear()
			p.res = [6]int64{1, p.limit}
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

	out := make([]guard.OpResult, len(all))
	t := time.UnixMicro(now)
	for i, p := range all {
		r := p.res
		out[i] = guard.OpResult{
			Allowed: r[0] != 0, Skipped: r[0] == 2, Remaining: r[1], ResetAfter: us(r[2]), RetryAfter: us(r[3]),
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

// sweep forgets ended states: a few on every call, all of them when the
// store is full, then the soonest to end until there is room.
func (s *Store) sweep(now int64, room int) {
	s.ops++
	if len(s.m)+room < MaxEntries && s.ops%64 != 0 {
		return
	}
	for k, st := range s.m {
		if st.expires <= now {
			delete(s.m, k)
		}
	}
	if len(s.m)+room < MaxEntries {
		return
	}
	type kv struct {
		k string
		e int64
	}
	list := make([]kv, 0, len(s.m))
	for k, st := range s.m {
		list = append(list, kv{k, st.expires})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].e < list[j].e })
	for _, x := range list[:len(s.m)+room-MaxEntries+1] {
		delete(s.m, x.k)
	}
}

// stateEnd is when everything the op's state holds has ended.
func (p *op) stateEnd(now int64) int64 {
	st := p.st
	end := max(st.e, st.tat, st.x, st.l)
	if st.cur > 0 || st.prev > 0 {
		end = max(end, st.ws+2*p.window)
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

func (p *op) untake() {
	if p.Spec.Algorithm != guard.Distinct {
		p.res[1] += p.cost
	} else if !p.seen {
		p.res[1]++
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
	return ok, rem, reset, retry, false
}

func (p *op) strike(now int64) int64 {
	st := p.st
	n := int64(1)
	if st.x > now {
		n = st.s + 1
	}
	d := int64(math.Floor(math.Min(float64(p.lockInitial)*math.Pow(p.factor, float64(n-1)), float64(p.lockMax))))
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

func (p *op) refund(now int64) {
	st := p.st
	switch p.Spec.Algorithm {
	case guard.FixedWindow:
		at := p.At.UnixMicro()
		if p.At.IsZero() {
			at = 0
		}
		if st.e <= now || (at > 0 && at < st.e-p.window-2000) {
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
			st.prev = max(0, st.prev-p.cost)
		default:
			return
		}
		st.ws = p.ws(now)
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
	st.c, st.e, st.tat, st.ws, st.cur, st.prev, st.z = 0, 0, 0, 0, 0, 0, nil
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

// swRead brings cur and prev to the window of now.
func (p *op) swRead(now int64) {
	st, ws := p.st, p.ws(now)
	switch st.ws {
	case ws:
	case ws - p.window:
		st.cur, st.prev = 0, st.cur
	default:
		st.cur, st.prev = 0, 0
	}
	st.ws = ws
}

func (p *op) swCheck(now, cost int64) (bool, int64, int64, int64) {
	st, win := p.st, p.window
	ws := p.ws(now)
	cur, prev := int64(0), int64(0)
	switch st.ws {
	case ws:
		cur, prev = st.cur, st.prev
	case ws - win:
		prev = st.cur
	}
	elapsed := now - ws
	est := cur + ceilDiv(prev*(win-elapsed), win)
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
	if est+cost <= p.limit {
		return true, p.limit - est - cost, ws + 2*win - now, 0
	}
	var reset, retry int64
	if cur+cost > p.limit {
		retry = (win - elapsed) + decay(cur, p.limit-cost)
	} else {
		retry = max(1, decay(prev, p.limit-cost-cur)-elapsed)
	}
	if cur > 0 {
		reset = ws + 2*win - now
	} else if prev > 0 {
		reset = ws + win - now
	}
	return false, max(0, p.limit-est), reset, retry
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

// trim keeps the limit highest-scored entries.
func (p *op) trim() {
	if n := int64(len(p.st.z)); n > p.limit {
		p.st.z = p.st.z[n-p.limit:]
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

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }
