package guard

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
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
	size int64
	// m maps a denyKey to its *denial. A sync.Map: the attacker's repeats
	// read it from every core at once without a lock or a shared write.
	m sync.Map
	n atomic.Int64 // its entries (a few more while puts race)
	// gens count the drops, in stripes by the state (rule and subject)
	// they drop: a denial observed while its state's stripe moved is not
	// kept (it may be what the drop ended).
	gens [genStripes]atomic.Uint64
	// room lets one put at a time drop entries when the cache is full.
	room  sync.Mutex
	scans int // the full scans room made (under room)
	// shared holds the Rules of recent cached denials (Guard.cached), in
	// slots by the hash of their key: at most sharedSlots of them.
	shared [sharedSlots]atomic.Pointer[sharedRules]
	seed   maphash.Seed
}

// genStripes is the number of stripes of the drops' counts: a drop stops
// the learning of the denials read meanwhile of one state in that many,
// not of every state.
const genStripes = 4096

// stateKey names a rule's state for a subject: a denyKey without a
// distinct rule's value.
type stateKey struct {
	id  string
	tag tagKey
}

// stripe is the count of the drops of the state of (id, tag).
func (c *denyCache) stripe(id string, tag tagKey) *atomic.Uint64 {
	return &c.gens[maphash.Comparable(c.seed, stateKey{id, tag})%genStripes]
}

// genOf is the count of key's state's drops so far (0 for no cache).
func (c *denyCache) genOf(key denyKey) uint64 {
	if c == nil {
		return 0
	}
	return c.stripe(key.id, key.tag).Load()
}

// sharedSlots bounds the cached denials whose Rules are shared: an
// attacker's repeats of up to about that many subjects at once allocate
// nothing, and what they keep is bounded whatever the cache's size.
const sharedSlots = 4096

// slots are where key's shared Rules may be kept: two, by halves of the
// key's hash.
func (c *denyCache) slots(key denyKey) [2]*atomic.Pointer[sharedRules] {
	h := maphash.Comparable(c.seed, key)
	return [2]*atomic.Pointer[sharedRules]{&c.shared[h%sharedSlots], &c.shared[h>>32%sharedSlots]}
}

// denyKey names a rule's state for a subject (the rule's id and the
// subject's tag) and, for a distinct rule, the value denied: a string
// and arrays, so that looking a denial up builds nothing.
type denyKey struct {
	id    string
	tag   tagKey
	value valueKey // a distinct rule's; zero for the others
}

type denial struct {
	res   Result
	until time.Time // the entry's end: min(retry, ttl)
	retry time.Time // the denial's end
}

func newDenyCache(ttl time.Duration, size int) *denyCache {
	return &denyCache{ttl: ttl, size: int64(size), seed: maphash.MakeSeed()}
}

// get returns the cached denial of key at now, its RetryAfter counted
// down, and marks it Cached; with its entry.
func (c *denyCache) get(key denyKey, now time.Time) (*denial, Result, bool) {
	v, ok := c.m.Load(key)
	if !ok {
		return nil, Result{}, false
	}
	e := v.(*denial)
	if !now.Before(e.until) {
		c.remove(key, v)
		return nil, Result{}, false
	}
	res := e.res
	res.Cached, res.Skipped = true, false
	res.RetryAfter = max(e.retry.Sub(now), time.Microsecond)
	res.ResetAfter = max(res.ResetAfter-e.res.RetryAfter+res.RetryAfter, 0)
	return e, res, true
}

// put caches a denial observed at now, its state's drops then at gen
// (genOf before the store was asked): if a drop of its state came since,
// the denial may be what it ended, and is not kept.
func (c *denyCache) put(key denyKey, res Result, now time.Time, gen uint64) (kept bool) {
	e := &denial{res: res, until: now.Add(min(res.RetryAfter, c.ttl)), retry: now.Add(res.RetryAfter)}
	if c.n.Load() >= c.size {
		c.makeRoom(now)
	}
	if _, loaded := c.m.Swap(key, e); !loaded {
		c.n.Add(1)
	}
	// a drop counts before it deletes: one that came before this check
	// is seen here, one after it deletes e
	if c.genOf(key) != gen {
		c.remove(key, e)
		return false
	}
	return true
}

// makeRoom drops what has ended, and if that is not enough, any entries
// (in the order of a hash seeded per process), down to 15/16 of the size:
// a flood of new denials on a full cache scans it once every size/16
// puts, not on every put. A dropped denial is asked of the store again,
// never admitted wrongly.
func (c *denyCache) makeRoom(now time.Time) {
	c.room.Lock()
	defer c.room.Unlock()
	if c.n.Load() < c.size {
		return // another put made room
	}
	c.scans++
	c.m.Range(func(k, v any) bool {
		if !now.Before(v.(*denial).until) {
			c.remove(k, v)
		}
		return true
	})
	target := min(c.size-1, c.size-c.size/16)
	c.m.Range(func(k, v any) bool {
		if c.n.Load() <= target {
			return false
		}
		c.remove(k, v)
		return true
	})
}

// remove drops key's entry if it is still v.
func (c *denyCache) remove(key, v any) {
	if c.m.CompareAndDelete(key, v) {
		c.n.Add(-1)
	}
}

func (c *denyCache) drop(key denyKey) {
	c.stripe(key.id, key.tag).Add(1)
	if _, loaded := c.m.LoadAndDelete(key); loaded {
		c.n.Add(-1)
	}
}

// dropState drops the entries of a rule's state for a subject, every
// value of a distinct rule's included: an unblock, rare enough to scan
// for.
func (c *denyCache) dropState(id string, tag tagKey) {
	c.stripe(id, tag).Add(1)
	c.m.Range(func(k, v any) bool {
		if dk := k.(denyKey); dk.id == id && dk.tag == tag {
			c.remove(k, v)
		}
		return true
	})
}

func (c *denyCache) clear() {
	for i := range c.gens {
		c.gens[i].Add(1)
	}
	for i := range c.shared {
		c.shared[i].Store(nil)
	}
	c.m.Range(func(k, v any) bool {
		c.remove(k, v)
		return true
	})
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
