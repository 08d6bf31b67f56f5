package guard

import (
	"sync"
	"time"
)

// denyCache remembers denials in process, keyed by the denying rule's
// state (rule id and subject tag, and the value of a distinct rule), so an
// attacker's repeats are answered without the store. An entry lives until
// the denial's retry-after, capped at ttl: it answers only what the store
// would answer until then. A refund or an unblock made through this
// process drops the entry at once; an unblock made through another
// process, when it is told (Guard.Forget); a store that lost its data,
// within ttl. Only denials that time alone ends are cached (see
// rule.cacheable): never a lockout or a failure count. Durations are the
// store's; the local monotonic clock only measures them.
type denyCache struct {
	ttl  time.Duration
	size int
	mu   sync.RWMutex // read-locked on the attacker's path: its repeats do not queue on one another
	m    map[denyKey]denial
}

// denyKey names a rule's state for a subject (the rule's id and the
// subject's tag) and, for a distinct rule, the value denied: a struct, so
// that looking a denial up builds no string.
type denyKey struct{ id, tag, value string }

type denial struct {
	res   Result
	until time.Time // the entry's end: min(retry, ttl)
	retry time.Time // the denial's end
}

func newDenyCache(ttl time.Duration, size int) *denyCache {
	return &denyCache{ttl: ttl, size: size, m: make(map[denyKey]denial)}
}

// get returns the cached denial of key at now, its RetryAfter counted
// down, and marks it Cached.
func (c *denyCache) get(key denyKey, now time.Time) (Result, bool) {
	c.mu.RLock()
	e, ok := c.m[key]
	c.mu.RUnlock()
	if ok && !now.Before(e.until) {
		c.mu.Lock()
		if e2, still := c.m[key]; still && !now.Before(e2.until) {
			delete(c.m, key)
		}
		c.mu.Unlock()
		ok = false
	}
	if !ok {
		return Result{}, false
	}
	res := e.res
	res.Cached, res.Skipped = true, false
	res.RetryAfter = max(e.retry.Sub(now), time.Microsecond)
	res.ResetAfter = max(res.ResetAfter-e.res.RetryAfter+res.RetryAfter, 0)
	return res, true
}

// put caches a denial observed at now.
func (c *denyCache) put(key denyKey, res Result, now time.Time) {
	e := denial{res: res, until: now.Add(min(res.RetryAfter, c.ttl)), retry: now.Add(res.RetryAfter)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.size {
		// Make room: drop what has ended, and if that is not enough, any
		// entry (map order is random); a dropped denial is asked of the
		// store again, never admitted wrongly.
		for k, v := range c.m {
			if !now.Before(v.until) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < c.size {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = e
}

func (c *denyCache) drop(key denyKey) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

// dropState drops the entries of a rule's state for a subject, every
// value of a distinct rule's included: an unblock, rare enough to scan
// for.
func (c *denyCache) dropState(id, tag string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k.id == id && k.tag == tag {
			delete(c.m, k)
		}
	}
}

func (c *denyCache) clear() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

// leases are the blocks of units this process took from leased rules (see
// [Lease]), spent locally until they run out or their window ends.
type leases struct {
	mu sync.Mutex
	m  map[string]*lease
	// refilling marks the keys one request is refilling from the store:
	// the others that find the lease empty meanwhile ask for their own
	// unit only, so a burst does not take a lease per request.
	refilling map[string]bool
}

type lease struct {
	units int64
	until time.Time // the end of the window the units were taken in
}

// take spends n leased units of key at now; it returns what is left.
// When it cannot, refill reports whether this caller should ask the store
// for a new lease (no other caller is doing so); it must then call done.
func (l *leases) take(key string, n int64, now time.Time) (left int64, ok, refill bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[key]
	if e == nil || !now.Before(e.until) || e.units < n {
		if l.refilling[key] {
			return 0, false, false
		}
		if l.refilling == nil {
			l.refilling = map[string]bool{}
		}
		l.refilling[key] = true
		return 0, false, true
	}
	e.units -= n
	return e.units, true, false
}

// done ends the refill of key that take handed to its caller.
func (l *leases) done(key string) {
	l.mu.Lock()
	delete(l.refilling, key)
	l.mu.Unlock()
}

// give puts back n units that take spent on a request that was denied.
func (l *leases) give(key string, n int64) {
	l.mu.Lock()
	if e := l.m[key]; e != nil {
		e.units += n
	}
	l.mu.Unlock()
}

// grant adds units the store granted, valid until the end of their window
// (less a little, so they are never spent in the next window).
func (l *leases) grant(key string, units int64, now, until time.Time) {
	const margin = 50 * time.Millisecond
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) > 10000 {
		l.m = map[string]*lease{} // a bound; dropped units are under-admission only
	}
	until = until.Add(-margin)
	if e := l.m[key]; e != nil && e.units > 0 && now.Before(e.until) && !e.until.After(until) {
		e.units += units // same window: keep what is left
		return
	}
	l.m[key] = &lease{units: units, until: until}
}

func (l *leases) drop(key string) {
	l.mu.Lock()
	delete(l.m, key)
	l.mu.Unlock()
}

func (l *leases) clear() {
	l.mu.Lock()
	clear(l.m)
	l.mu.Unlock()
}
