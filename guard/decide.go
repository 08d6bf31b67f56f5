package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// Allow decides whether req may proceed and, if so, consumes one unit of
// every rule of its action. Failure-counting rules count the attempt as a
// failure at admission; [Guard.Settle] gives it back when the attempt
// succeeds, so their limits hold exactly under any concurrency. A denied
// request consumes nothing.
func (g *Guard) Allow(ctx context.Context, req Request) (Decision, error) {
	return g.AllowN(ctx, req, 1)
}

// AllowN is Allow for n units. It runs in five steps (see the package
// comment): a denial this process remembers answers at once; else the
// ops are planned (a lease may pay locally), the store decides (the
// backstop only when the store fails), the results become the decision,
// and the leases and the deny cache learn from it.
func (g *Guard) AllowN(ctx context.Context, req Request, n int64) (Decision, error) {
	if n < 1 {
		return Decision{}, fmt.Errorf("guard: cost %d: %w", n, ErrInvalidInput)
	}
	subject := req.Subject
	subject.device = ""
	var issued time.Time
	if id, at, ok := g.devices.verify(req.Device, req.Subject.Account); ok {
		subject.device, issued = id, at
	}
	rules := g.match(req, subject.device != "")
	maybe := subject.device != "" && dependsOnDevice(rules)
	if !maybe {
		subject.device = "" // nothing asks: the device counts as untrusted
	}
	if len(rules) == 0 {
		return Decision{Allowed: true, Rules: []Result{}}, nil
	}
	if err := g.hasDims(rules, req.Subject); err != nil {
		return Decision{}, err
	}
	now := g.clock()
	// the tags are hashed once, here or in the attempt: on the stack
	// while the deny cache answers (an attacker's repeat allocates
	// nothing: its tag is an array, its decision's Rules shared)
	var tagBuf [16]string
	var genBuf [16]uint64
	tags, gens := tagBuf[:], genBuf[:]
	if len(rules) > len(tagBuf) {
		tags, gens = make([]string, len(rules)), make([]uint64, len(rules))
	}
	tags, gens = tags[:len(rules)], gens[:len(rules)]
	if d, ok := g.remembered(rules, tags, gens, subject, maybe, now); ok {
		return d, nil
	}
	a := &attempt{g: g, subject: subject, n: n, issued: issued, rules: rules, maybe: maybe, now: now}
	a.tags = append(a.tagBuf[:0], tags...) // on the heap past 16 rules
	a.gens = append(a.genBuf[:0], gens...)
	if err := a.plan(); err != nil {
		return Decision{}, err
	}
	defer a.refilled()
	a.decide(ctx)
	if a.cancelled {
		// the caller is gone: no decision (not the backstop's either),
		// and nothing the request started goes on
		return Decision{}, fmt.Errorf("guard: %w", context.Cause(ctx))
	}
	d := a.decision()
	a.learn(&d)
	a.prune(&d)
	return d, nil
}

// attempt is one AllowN in progress.
type attempt struct {
	g       *Guard
	rules   []*rule
	subject Subject
	// maybe: the request holds a token verified for its account that the
	// store is to judge (expiry, revocation), and some rule depends on
	// it; issued is the token's issue time
	maybe   bool
	issued  time.Time
	applied []bool // per rule, when maybe: an op of it applied
	n       int64
	now     time.Time  // the process's clock: the deny cache and leases
	tagBuf  [16]string // most actions have a few rules: no allocation
	genBuf  [16]uint64
	gens    []uint64 // per cacheable rule, its state's drops before (see learn)
	tags    []string // per rule, filled as needed (see tag)
	d       Decision
	ops     []store.Op
	at      []int       // the rule of each op (-1: the device check)
	opBuf   [8]store.Op // ops and at of up to 7 rules and a device check: no allocation
	atBuf   [8]int
	local   []int    // the rules paid from this process's lease
	refills []string // the leases this attempt refills from the store
	res     []store.OpResult
	err     error // the store's
	// cancelled: the store failed because the caller's context ended
	cancelled bool
}

// remembered is step 1: a denial this process remembers (the deny cache)
// answers without the store, rule by rule, hashing only as far as the
// first remembered denial (into tags), so an attacker's repeat costs one
// keyed hash.
func (g *Guard) remembered(rules []*rule, tags []string, gens []uint64, s Subject, maybe bool, now time.Time) (Decision, bool) {
	if g.cache == nil {
		return Decision{}, false
	}
	for i, r := range rules {
		if !r.cacheable() || (maybe && (r.filtersDevice || r.keyedDevice)) {
			continue
		}
		k := g.cacheKey(rules, tags, i, s)
		gens[i] = g.cache.genOf(k) // before the store is asked
		if e, res, ok := g.cache.get(k, now); ok {
			return g.cached(rules, i, k, e, res, now), true
		}
		if tags[i] == "" {
			// hashed once: the attempt's ops take the tag from here
			if tags[i] = g.knownTag(rules, tags, i); tags[i] == "" {
				tags[i] = string(k.tag[:])
			}
		}
	}
	return Decision{}, false
}

// cacheKey names rule i's state for subject s in the deny cache: the
// rule's id and the subject's tag, and for a distinct rule the value too
// (a value already seen is admitted where a new one is denied).
func (g *Guard) cacheKey(rules []*rule, tags []string, i int, s Subject) denyKey {
	r := rules[i]
	k := denyKey{id: r.spec.ID}
	if t := g.knownTag(rules, tags, i); t != "" {
		k.tag = tagKeyOf(t)
	} else {
		k.tag = g.subjectTag(r.dims, s) // no string: a cached denial allocates no tag
	}
	if r.Algorithm == store.Distinct {
		k.value = g.valueKeyOf(r.Of, s)
	}
	return k
}

// tag is rule i's subject tag (see Guard.tag).
func (a *attempt) tag(i int) string { return a.g.tag(a.rules, a.tags, i, a.subject) }

// plan is step 2: one op per rule, except the rules a lease of this
// process pays for.
func (a *attempt) plan() error {
	g := a.g
	a.d = Decision{Allowed: true, Rules: make([]Result, len(a.rules)), Device: DeviceUntrusted}
	a.ops, a.at = a.opBuf[:0], a.atBuf[:0] // (past 8 ops, append allocates)
	if a.maybe {
		a.d.Device = ""
		a.applied = make([]bool, len(a.rules))
		a.ops = append(a.ops, store.Op{Kind: store.DeviceCheck, Spec: g.devices.spec, Tag: g.deviceTag(a.subject.Account), Cost: 1, At: a.issued})
		a.at = append(a.at, -1)
	}
	for i, r := range a.rules {
		op := store.Op{Kind: store.Take, Spec: r.spec, Tag: a.tag(i), Cost: a.n}
		dependent := a.maybe && (r.filtersDevice || r.keyedDevice)
		switch r.Algorithm {
		case store.Concurrency:
			if a.d.Lease == "" {
				a.d.Lease = newID()
			}
			op.Member = a.d.Lease
		case store.SlidingLog:
			op.Member = newID() // names this request's log entries
		case store.Distinct:
			v, err := g.dimension(r.Of, a.subject)
			if err != nil {
				a.refilled()
				return fmt.Errorf("rule %s: %w", r.Name, err)
			}
			op.Member = g.valueHash(r.Of, v)
		}
		if dependent {
			a.planDependent(i, op)
			continue
		}
		if r.Lease != nil {
			left, ok, refill := g.leases.take(r.spec.ID+op.Tag, a.n, a.now)
			if ok {
				a.d.Rules[i] = Result{Rule: r.Name, Mode: r.Mode, Allowed: true, Limit: r.Limit, Window: r.Window, Remaining: left, Leased: true, tag: op.Tag}
				a.local = append(a.local, i)
				continue
			}
			if refill {
				a.refills = append(a.refills, r.spec.ID+op.Tag)
				op.Extra = max(0, r.Lease.Units-a.n)
			}
		}
		a.ops, a.at = append(a.ops, op), append(a.at, i)
	}
	return nil
}

// planDependent plans rule i, whose op depends on the device: one op per
// value of the device the rule applies to; the store's device check picks
// the one that applies.
func (a *attempt) planDependent(i int, op store.Op) {
	r := a.rules[i]
	if r.onTrusted {
		t := op
		t.Cond = store.CondTrusted
		a.ops, a.at = append(a.ops, t), append(a.at, i)
	}
	if r.onUntrusted {
		u := op
		u.Cond = store.CondUntrusted
		if r.keyedDevice {
			s := a.subject
			s.device = ""
			u.Tag = a.g.tag([]*rule{r}, make([]string, 1), 0, s)
		}
		a.ops, a.at = append(a.ops, u), append(a.at, i)
	}
}

// refilled ends the lease refills this attempt took on.
func (a *attempt) refilled() {
	for _, k := range a.refills {
		a.g.leases.done(k)
	}
	a.refills = nil
}

// decide is step 3: the store decides. While it answers, it alone does,
// and the backstop is told what it answered for the rules that fall back
// on it. When it fails, the backstop decides those rules (counting from
// what the store last said) and the others deny.
func (a *attempt) decide(ctx context.Context) {
	if len(a.ops) == 0 {
		return
	}
	g := a.g
	backed := g.backedOps(a.rules, a.at, a.ops)
	if len(backed) > 0 {
		g.backstop.Begin(backed)
	}
	a.res, a.err = g.do(ctx, g.store, a.ops)
	if a.err == nil {
		g.mirror(a.rules, a.at, a.ops, a.res)
		return
	}
	if len(backed) > 0 {
		g.backstop.End(backed)
	}
	if ctx.Err() != nil {
		a.cancelled = true // a hang-up is not a store failure
		return
	}
	a.res = g.fallback(ctx, a.rules, a.at, a.ops)
}

// backedOps are the ops of the rules that fall back on the backstop.
func (g *Guard) backedOps(rules []*rule, at []int, ops []store.Op) []store.Op {
	if g.backstop == nil {
		return nil
	}
	var out []store.Op
	for j, i := range at {
		if i < 0 || rules[i].allow {
			op := ops[j]
			op.Extra = 0
			out = append(out, op)
		}
	}
	return out
}

// decision is step 4: the results in configuration order, allowed only
// if every enforcing rule allowed.
func (a *attempt) decision() Decision {
	d := a.d
	if a.maybe {
		for _, i := range a.local {
			a.applied[i] = true
		}
		for i, r := range a.rules {
			if r.filtersDevice || r.keyedDevice {
				// until an op of it applies: it decides nothing
				d.Rules[i] = Result{Rule: r.Name, Mode: r.Mode, Allowed: true, Skipped: true}
			}
		}
	}
	for j, i := range a.at {
		if d.At.IsZero() {
			d.At = a.res[j].Now
		}
		if i < 0 {
			d.Device = DeviceUntrusted
			if a.res[j].Allowed {
				d.Device = DeviceTrusted
			}
			continue
		}
		if a.res[j].Inapplicable {
			continue
		}
		if a.applied != nil {
			a.applied[i] = true
		}
		d.Rules[i] = a.rules[i].result(a.res[j], a.ops[j].Member)
		d.Rules[i].tag = a.ops[j].Tag
		d.Rules[i].StoreError = a.err != nil
		d.Rules[i].Backstop = a.err != nil && a.rules[i].allow
	}
	d.StoreError = a.err
	for i, r := range a.rules {
		res := d.Rules[i]
		switch {
		case res.Challenged:
			if !d.Challenged {
				d.Challenged, d.ChallengedBy, d.Fallback = true, r.Name, r.Fallback
			}
		case !res.Allowed && r.spec.Enforce:
			if d.Allowed {
				d.Allowed, d.DeniedBy = false, r.Name
			}
			d.RetryAfter = max(d.RetryAfter, res.RetryAfter)
		}
	}
	if !d.Allowed {
		d.Challenged, d.ChallengedBy, d.Fallback = false, "", ""
	}
	return d
}

// learn is step 5: units paid from a lease go back when the request was
// denied; extra units the store granted become this process's lease; a
// denial that only time ends is remembered until then (at most the deny
// cache's ttl).
func (a *attempt) learn(d *Decision) {
	g := a.g
	for _, i := range a.local {
		if !d.Allowed {
			g.leases.give(a.rules[i].spec.ID+a.tags[i], a.n)
		}
	}
	if d.Allowed && d.StoreError == nil {
		for j, i := range a.at {
			if i < 0 {
				continue
			}
			if extra := d.Rules[i].taken - a.n; extra > 0 && a.ops[j].Extra > 0 {
				g.leases.grant(a.rules[i].spec.ID+a.tags[i], extra, a.now, a.now.Add(d.Rules[i].ResetAfter))
			}
		}
	}
	if !d.Allowed && d.StoreError == nil && g.cache != nil && a.n == 1 {
		for i, r := range a.rules {
			if a.maybe && (r.filtersDevice || r.keyedDevice) {
				continue // the device decides which of its states applies
			}
			if res := d.Rules[i]; !res.Allowed && !res.Skipped && !res.Cached && r.cacheable() && !res.Locked && res.RetryAfter > 0 {
				// not if a refund, release or unblock of its state was dropped
				// meanwhile (the denial may be what it ended); kept, its tag too
				if g.cache.put(g.cacheKey(a.rules, a.tags, i, a.subject), res, a.now, a.gens[i]) {
					g.rememberTag(r.dims, a.subject)
				}
			}
		}
	}
}

// prune drops from d the rules that did not apply: those whose device
// condition the store's device check ruled out.
func (a *attempt) prune(d *Decision) {
	if a.applied == nil {
		return
	}
	out := d.Rules[:0]
	for i, res := range d.Rules {
		if a.applied[i] {
			out = append(out, res)
		}
	}
	d.Rules = out
}
