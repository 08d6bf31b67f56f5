package guard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Subject is who or what a request is about. Parse its fields with
// [ParseEmail], [ParsePhone], [ParseIP] and [ParseAccount]; a rule keyed on a
// field the subject lacks fails the request with ErrInvalidInput rather
// than leaving it unlimited.
type Subject struct {
	Destination Destination
	IP          netip.Addr
	Account     string
}

// Request is one attempt at an action.
type Request struct {
	Action  string
	Subject Subject
	// Attributes are matched by the rules' `when` filters (channel, purpose).
	Attributes map[string]string
}

// Outcome is how an admitted attempt ended, for the failure-counting rules
// (see [Guard.Settle]).
type Outcome int

// The outcomes.
const (
	// Failure: the attempt failed. The failure counted at admission stays;
	// a rule with a lockout that reached its limit starts a lockout.
	Failure Outcome = iota + 1
	// Success: the failure counted at admission is given back, and rules
	// with resetOnSuccess are cleared.
	Success
	// Void: the attempt never happened (the authenticator was
	// unavailable): every failure counted at admission is given back.
	Void
	// Stray: the attempt failed against nothing the subject owns (an OTP
	// guess when no code is pending). It is given back to the rules keyed
	// on destination or account, so strangers cannot use up an owner's
	// budget, and stays a Failure for the others (IP, global).
	Stray
)

// Result is one rule's part in a decision.
type Result struct {
	// Rule is the rule's name.
	Rule string
	// Mode is the rule's mode: enforce, shadow or soft.
	Mode string
	// Allowed reports whether this rule alone allows the request. A shadow
	// rule may report false for an allowed request.
	Allowed bool
	// Limit is the rule's nominal limit; Window its window.
	Limit  int64
	Window time.Duration
	// Remaining is how many more requests (or failures) the rule admits
	// now under its nominal limit; never negative.
	Remaining int64
	// Over reports that a soft rule admitted the request above its nominal
	// limit, inside its overage.
	Over bool
	// ResetAfter is when the rule's counter is back to empty.
	ResetAfter time.Duration
	// RetryAfter is, when the rule denies, how long until it would allow.
	RetryAfter time.Duration
	// Locked reports that a lockout denies.
	Locked bool
	// StoreError reports that the store failed and the rule's onStoreError
	// policy decided; Backstop that the policy was allow and the
	// in-process backstop decided.
	StoreError, Backstop bool
	// Skipped reports that the rule was not evaluated because another
	// rule of the request denied first.
	Skipped bool
	// Cached reports a denial answered from the in-process deny cache,
	// without asking the store.
	Cached bool
	// Leased reports an admission paid from this process's lease of the
	// rule's units, without asking the store.
	Leased bool

	taken  int64  // units the store consumed for this rule
	member string // the entry a set algorithm added
}

// Decision is the answer to [Guard.Allow].
type Decision struct {
	// Allowed reports whether every enforcing rule allowed.
	Allowed bool
	// DeniedBy names the first enforcing rule that denied; "" if allowed.
	DeniedBy string
	// RetryAfter is, when denied, the longest wait of the denying rules.
	RetryAfter time.Duration
	// Rules holds one Result per rule of the action, in configuration order.
	Rules []Result
	// StoreError is the store's error when the store failed and the rules'
	// onStoreError policies decided (Allowed tells how).
	StoreError error
	// Lease identifies the concurrency leases taken, for [Guard.Release].
	Lease string
	// At is the store's clock when it decided (zero when nothing asked it).
	At time.Time
}

// Options configure a Guard.
type Options struct {
	// Secret keys the hash of every identifier in a store key. At least 16
	// bytes; required.
	Secret []byte
	// Backstop decides for rules with onStoreError allow while the Store
	// fails: a store private to this process (memstore.New), so each
	// process still limits on its own. Required when a rule allows on
	// store errors.
	Backstop Store
	// Clock reads this process's monotonic clock for the deny cache and
	// leases, which measure only durations the store reported. Default
	// time.Now. Rule windows always run on the store's clock.
	Clock func() time.Time
	// StoreClock, when set, learns the store's time from its answers;
	// give the Backstop its Now (memstore.New(clock.Now)) so that both
	// count in the same time.
	StoreClock *StoreClock
}

// Guard evaluates the configured rules of an action against a Store.
// It is safe for concurrent use.
type Guard struct {
	store    Store
	backstop Store
	secret   []byte
	timeout  time.Duration
	ipv6Bits int
	byAction map[string][]*rule
	all      []*rule
	clock    func() time.Time
	macs     sync.Pool // keyed HMAC-SHA256 states
	global   string    // the tag of the global dimension, hashed once
	cache    *denyCache
	leases   *leases
	storeClk *StoreClock
}

// rule is a Rule with what every decision needs computed once.
type rule struct {
	Rule
	spec  *Spec
	dims  []string // Key, sorted: the order a rule lists them in does not matter
	limit int64    // effective limit: with a soft rule's overage
	allow bool     // onStoreError allow
	owned bool     // keyed on destination or account (see Stray)
}

// New returns a Guard for a validated configuration.
func New(cfg Config, store Store, opts Options) (*Guard, error) {
	if len(opts.Secret) < 16 {
		return nil, errors.New("guard: the key-hashing secret must be at least 16 bytes")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	g := &Guard{
		store:    store,
		backstop: opts.Backstop,
		secret:   slices.Clone(opts.Secret),
		timeout:  cfg.Store.Timeout,
		ipv6Bits: cfg.Network.IPv6Prefix,
		byAction: map[string][]*rule{},
		clock:    opts.Clock,
		leases:   &leases{m: map[string]*lease{}},
		storeClk: opts.StoreClock,
	}
	g.macs.New = func() any { return &macState{h: hmac.New(sha256.New, g.secret)} }
	if cfg.Store.DenyCache.TTL > 0 {
		g.cache = newDenyCache(cfg.Store.DenyCache.TTL, cfg.Store.DenyCache.Size)
	}
	packs := packing(cfg.Rules)
	for _, r := range cfg.Rules {
		if r.OnStoreError == "allow" && g.backstop == nil {
			return nil, fmt.Errorf("guard: rule %s allows on store errors, which needs Options.Backstop", r.Name)
		}
		cr := &rule{Rule: r, limit: r.Limit, allow: r.OnStoreError == "allow", dims: slices.Sorted(slices.Values(r.Key)),
			owned: slices.Contains(r.Key, "destination") || slices.Contains(r.Key, "account")}
		if r.Mode == ModeSoft {
			cr.limit += int64(float64(r.Limit) * float64(r.Overage))
		}
		cr.spec = &Spec{ID: ruleID(r.Name, r.Algorithm), Algorithm: r.Algorithm, Limit: cr.limit, Window: r.Window,
			Enforce: r.Mode != ModeShadow, Lockout: r.Lockout}
		if ttl, ok := packs[dimsKey(r.Key)]; ok && r.Algorithm.packable() {
			cr.spec.Packed, cr.spec.PackTTL = true, ttl
		}
		g.byAction[r.Action] = append(g.byAction[r.Action], cr)
		g.all = append(g.all, cr)
	}
	g.global = g.hashValues([]string{"global"}, []string{""})
	return g, nil
}

// packing decides which rules share a packed hash: those of the packable
// algorithms keyed on the same dimensions, when there are at least two
// (one rule alone is cheaper as a plain key). It returns the hash's TTL per
// set of dimensions: the longest state its rules keep.
func packing(rules []Rule) map[string]time.Duration {
	count := map[string]int{}
	ttl := map[string]time.Duration{}
	for _, r := range rules {
		if !r.Algorithm.packable() {
			continue
		}
		k := dimsKey(r.Key)
		count[k]++
		keep := r.Window
		if r.Algorithm == SlidingWindow {
			keep = 2 * r.Window
		}
		if r.Lockout != nil {
			keep = max(keep, r.Lockout.Reset)
		}
		ttl[k] = max(ttl[k], keep)
	}
	for k, n := range count {
		if n < 2 {
			delete(ttl, k)
		}
	}
	return ttl
}

// Allow decides whether req may proceed and, if so, consumes one unit of
// every rule of its action. Failure-counting rules count the attempt as a
// failure at admission; [Guard.Settle] gives it back when the attempt
// succeeds, so their limits hold exactly under any concurrency. A denied
// request consumes nothing.
func (g *Guard) Allow(ctx context.Context, req Request) (Decision, error) {
	return g.AllowN(ctx, req, 1)
}

// AllowN is Allow for n units.
func (g *Guard) AllowN(ctx context.Context, req Request, n int64) (Decision, error) {
	if n < 1 {
		return Decision{}, fmt.Errorf("guard: cost %d: %w", n, ErrInvalidInput)
	}
	rules := g.match(req)
	if len(rules) == 0 {
		return Decision{Allowed: true, Rules: []Result{}}, nil
	}
	if err := g.hasDims(rules, req.Subject); err != nil {
		return Decision{}, err
	}
	var tagBuf [8]string // most actions have a few rules: no allocation
	var tags []string
	if len(rules) <= len(tagBuf) {
		tags = tagBuf[:len(rules)]
	} else {
		tags = make([]string, len(rules))
	}
	now := g.clock()
	if g.cache != nil {
		// rule by rule, hashing only as far as the first remembered denial:
		// an attacker's repeat costs one keyed hash, not one per rule
		for i, r := range rules {
			if !r.spec.Enforce {
				continue
			}
			if res, ok := g.cache.get(r.spec.ID+g.tag(rules, tags, i, req.Subject), now); ok {
				return g.cached(rules, i, res), nil
			}
		}
	}
	for i := range rules {
		g.tag(rules, tags, i, req.Subject)
	}

	d := Decision{Allowed: true, Rules: make([]Result, len(rules))}
	ops := make([]Op, 0, len(rules))
	at := make([]int, 0, len(rules)) // the rule of each op
	var local []int                  // rules paid from a local lease
	for i, r := range rules {
		op := Op{Kind: Take, Spec: r.spec, Tag: tags[i], Cost: n}
		switch r.Algorithm {
		case Concurrency:
			if d.Lease == "" {
				d.Lease = newID()
			}
			op.Member = d.Lease
		case SlidingLog:
			op.Member = newID() // names this request's log entries
		case Distinct:
			v, err := g.dimension(r.Of, req.Subject)
			if err != nil {
				return Decision{}, fmt.Errorf("rule %s: %w", r.Name, err)
			}
			op.Member = g.valueHash(r.Of, v)
		}
		if r.Lease != nil {
			left, ok, refill := g.leases.take(r.spec.ID+tags[i], n, now)
			if ok {
				d.Rules[i] = Result{Rule: r.Name, Mode: r.Mode, Allowed: true, Limit: r.Limit, Window: r.Window, Remaining: left, Leased: true}
				local = append(local, i)
				continue
			}
			if refill {
				defer g.leases.done(r.spec.ID + tags[i])
				op.Extra = max(0, r.Lease.Units-n)
			}
		}
		ops, at = append(ops, op), append(at, i)
	}
	if len(ops) > 0 {
		// The backstop counts first, for the rules that fall back on it
		// (onStoreError: allow): when the store then fails, its answer
		// is already there and counts everything this process admitted,
		// so a slow or failing Redis never buys an attacker a fresh
		// budget, even for requests in flight together.
		pre := g.shadow(ctx, rules, at, ops)
		res, err := g.do(ctx, g.store, ops)
		if err != nil {
			d.StoreError = err
			res = pre.fallback(rules, at, len(ops))
		}
		defer pre.settle(ctx, g, &d, res, err)
		veto := -1
		if err == nil {
			if g.storeClk != nil && len(res) > 0 {
				g.storeClk.observe(res[0].Now)
			}
			veto = pre.veto(rules, at, res)
			if veto >= 0 {
				g.refundStore(ctx, ops, res)
			}
		}
		for j, i := range at {
			d.Rules[i] = rules[i].result(res[j], ops[j].Member)
			d.Rules[i].StoreError = err != nil
			d.Rules[i].Backstop = (err != nil && rules[i].allow) || j == veto
			if d.At.IsZero() {
				d.At = res[j].Now
			}
		}
	}
	for i, r := range rules {
		if res := d.Rules[i]; !res.Allowed && r.spec.Enforce {
			if d.Allowed {
				d.Allowed, d.DeniedBy = false, r.Name
			}
			d.RetryAfter = max(d.RetryAfter, res.RetryAfter)
		}
	}

	// Leases: units paid locally go back when the request is denied;
	// extra units the store granted become this process's lease.
	for _, i := range local {
		if !d.Allowed {
			g.leases.give(rules[i].spec.ID+tags[i], n)
		}
	}
	if d.Allowed && d.StoreError == nil {
		for j, i := range at {
			if extra := d.Rules[i].taken - n; extra > 0 && ops[j].Extra > 0 {
				g.leases.grant(rules[i].spec.ID+tags[i], extra, now, now.Add(d.Rules[i].ResetAfter))
			}
		}
	}
	if !d.Allowed && d.StoreError == nil && g.cache != nil && n == 1 {
		for i, r := range rules {
			if res := d.Rules[i]; !res.Allowed && !res.Skipped && !res.Cached && r.cacheable(res) {
				g.cache.put(r.spec.ID+tags[i], res, now)
			}
		}
	}
	return d, nil
}

// cacheable reports whether a denial of r can be answered from the deny
// cache until its retry-after: only time ends it. Concurrency leases are
// released at any moment, and a failure count drops when an attempt in
// flight succeeds, so those are asked of the store every time; a lockout
// runs its course.
func (r *rule) cacheable(res Result) bool {
	return r.spec.Enforce && r.Algorithm != Concurrency && (r.Count == CountRequests || res.Locked) && res.RetryAfter > 0
}

// cached is the decision a cached denial of rules[i] answers: the store is
// not asked, the other rules are skipped.
func (g *Guard) cached(rules []*rule, i int, res Result) Decision {
	d := Decision{Rules: make([]Result, len(rules)), DeniedBy: rules[i].Name, RetryAfter: res.RetryAfter}
	for j, r := range rules {
		d.Rules[j] = Result{Rule: r.Name, Mode: r.Mode, Allowed: true, Limit: r.Limit, Window: r.Window, Skipped: true}
	}
	d.Rules[i] = res
	return d
}

// shadowed is what the backstop took for a decision, before the store
// was asked.
type shadowed struct {
	ops []Op
	idx []int // the decision's op of each
	res []OpResult
	err error
}

// shadow takes, in the backstop, the ops of the rules that fall back on
// it.
func (g *Guard) shadow(ctx context.Context, rules []*rule, at []int, ops []Op) *shadowed {
	sh := &shadowed{}
	for j, i := range at {
		if rules[i].allow {
			op := ops[j]
			op.Extra = 0
			sh.ops, sh.idx = append(sh.ops, op), append(sh.idx, j)
		}
	}
	if len(sh.ops) > 0 {
		sh.res, sh.err = g.do(ctx, g.backstop, sh.ops)
	}
	return sh
}

// fallback is the decision's results when the store failed: the
// backstop's for the rules that allow it, a denial for the others.
func (sh *shadowed) fallback(rules []*rule, at []int, n int) []OpResult {
	res := make([]OpResult, n)
	for j := range res {
		res[j] = OpResult{Allowed: false, RetryAfter: time.Second}
	}
	if sh.err == nil {
		for k, j := range sh.idx {
			res[j] = sh.res[k]
		}
	}
	return res
}

// veto finds an enforcing rule that the store admitted and the backstop
// denied: this process alone has already admitted its limit (counted
// while the store was failing, or by requests whose store calls timed
// out), so the request is denied as if the store had, and the op's result
// becomes the backstop's. -1 when none.
func (sh *shadowed) veto(rules []*rule, at []int, res []OpResult) int {
	if sh.err != nil {
		return -1
	}
	for k, j := range sh.idx {
		b := sh.res[k]
		if res[j].Allowed && !res[j].Skipped && !b.Allowed && !b.Skipped && rules[at[j]].spec.Enforce {
			res[j] = b
			return j
		}
	}
	return -1
}

// refundStore gives back what the store took for a decision vetoed
// after it answered. A failed refund errs towards denying.
func (g *Guard) refundStore(ctx context.Context, ops []Op, res []OpResult) {
	var back []Op
	for j, op := range ops {
		if op.Kind == Take && res[j].Taken > 0 {
			r := op
			r.Kind, r.Cost, r.Extra, r.At = Refund, res[j].Taken, 0, res[j].Now
			back = append(back, r)
			res[j].Taken = 0
		}
	}
	if len(back) > 0 {
		_, _ = g.do(ctx, g.store, back)
	}
}

// settle gives back to the backstop what it took for a request that was
// not admitted (or that the store did not count for that rule), so that
// it mirrors the store.
func (sh *shadowed) settle(ctx context.Context, g *Guard, d *Decision, res []OpResult, storeErr error) {
	if sh.err != nil || len(sh.ops) == 0 {
		return
	}
	var back []Op
	for k, j := range sh.idx {
		took := sh.res[k].Taken
		counted := d.Allowed && (storeErr != nil || (res[j].Allowed && !res[j].Skipped))
		if took > 0 && !counted {
			op := sh.ops[k]
			op.Kind, op.Cost, op.At = Refund, took, sh.res[k].Now
			back = append(back, op)
		}
	}
	if len(back) > 0 {
		_, _ = g.do(ctx, g.backstop, back)
	}
}

// Settle reports how an attempt that d admitted ended, to the
// failure-counting rules of its action (see [Outcome]). Pass the zero
// Decision when the decision is not at hand (the internal outcomes route):
// the store then assumes every rule counted the attempt in its current
// window.
func (g *Guard) Settle(ctx context.Context, req Request, d Decision, outcome Outcome) ([]Result, error) {
	rules := g.match(req)
	tags, err := g.tags(rules, req.Subject)
	if err != nil {
		return nil, err
	}
	var settled []*rule
	var ops []Op
	for i, r := range rules {
		if r.Count != CountFailures {
			continue
		}
		taken, member := int64(1), ""
		if d.Rules != nil {
			k := slices.IndexFunc(d.Rules, func(x Result) bool { return x.Rule == r.Name })
			if k < 0 || !d.Allowed {
				continue
			}
			taken, member = d.Rules[k].taken, d.Rules[k].member
		} else if r.Algorithm == SlidingLog {
			taken = 0 // its entry is named at admission, unknown here
		}
		kind := OpKind("")
		switch failed := outcome == Failure || (outcome == Stray && !r.owned); {
		case failed && r.Lockout != nil:
			kind = Strike
		case failed:
		case outcome == Success && r.ResetOnSuccess:
			kind = Clear
		case taken > 0:
			kind = Refund
		}
		if kind == "" {
			continue
		}
		op := Op{Kind: kind, Spec: r.spec, Tag: tags[i], Cost: max(taken, 1), Member: member, At: d.At}
		if r.Algorithm == Distinct && member == "" {
			v, err := g.dimension(r.Of, req.Subject)
			if err != nil {
				return nil, fmt.Errorf("rule %s: %w", r.Name, err)
			}
			op.Member = g.valueHash(r.Of, v)
		}
		if kind != Strike && g.cache != nil {
			g.cache.drop(r.spec.ID + tags[i])
		}
		settled, ops = append(settled, r), append(ops, op)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	if d.StoreError != nil {
		// The attempt was admitted by the backstop alone.
		res, err := g.do(ctx, g.backstop, ops)
		if err != nil {
			return nil, fmt.Errorf("settle %s outcome: %w", req.Action, err)
		}
		out := make([]Result, len(settled))
		for i, r := range settled {
			out[i] = r.result(res[i], "")
		}
		return out, nil
	}
	res, err := g.do(ctx, g.store, ops)
	if err != nil {
		return nil, fmt.Errorf("settle %s outcome: %w", req.Action, err)
	}
	// The backstop mirrors the store for the rules that fall back on it.
	var back []Op
	for i, r := range settled {
		if r.allow {
			back = append(back, ops[i])
		}
	}
	if len(back) > 0 {
		_, _ = g.do(ctx, g.backstop, back)
	}
	out := make([]Result, len(settled))
	for i, r := range settled {
		out[i] = r.result(res[i], "")
	}
	return out, nil
}

// Release gives back the concurrency leases that the decision with lease
// took for req.
func (g *Guard) Release(ctx context.Context, req Request, lease string) error {
	if lease == "" {
		return nil
	}
	rules := g.match(req)
	tags, err := g.tags(rules, req.Subject)
	if err != nil {
		return err
	}
	var ops []Op
	for i, r := range rules {
		if r.Algorithm == Concurrency {
			ops = append(ops, Op{Kind: Release, Spec: r.spec, Tag: tags[i], Cost: 1, Member: lease})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := g.do(ctx, g.store, ops); err != nil {
		return fmt.Errorf("release %s lease: %w", req.Action, err)
	}
	return nil
}

// Status is one rule's state for one subject (see [Guard.Status]).
type Status struct {
	Rule       string
	Remaining  int64
	ResetAfter time.Duration
	Locked     bool
	LockedFor  time.Duration
}

// Status reports, for every rule keyed on dimension alone, the state of
// the subject whose value of it s holds.
func (g *Guard) Status(ctx context.Context, dimension string, s Subject) ([]Status, error) {
	rules, ops, err := g.onDimension(dimension, s, Peek)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	res, err := g.do(ctx, g.store, ops)
	if err != nil {
		return nil, fmt.Errorf("read %s state: %w", dimension, err)
	}
	out := make([]Status, len(rules))
	for i, r := range rules {
		x := r.result(res[i], "")
		out[i] = Status{Rule: r.Name, Remaining: x.Remaining, ResetAfter: x.ResetAfter, Locked: x.Locked}
		if x.Locked {
			out[i].LockedFor = x.RetryAfter
		}
	}
	return out, nil
}

// Unblock forgets, for every rule keyed on dimension alone, the counters,
// lockouts and lockout history of the subject whose value of it s holds:
// an administrator's unlock. Denials cached by other processes end within
// store.denyCache.ttl.
func (g *Guard) Unblock(ctx context.Context, dimension string, s Subject) ([]string, error) {
	rules, ops, err := g.onDimension(dimension, s, Unblock)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	if _, err := g.do(ctx, g.store, ops); err != nil {
		return nil, fmt.Errorf("unblock %s: %w", dimension, err)
	}
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.Name
		if g.cache != nil {
			g.cache.drop(ops[i].Spec.ID + ops[i].Tag)
		}
		g.leases.drop(ops[i].Spec.ID + ops[i].Tag)
	}
	return names, nil
}

func (g *Guard) onDimension(dimension string, s Subject, kind OpKind) ([]*rule, []Op, error) {
	if !slices.Contains(Dimensions, dimension) {
		return nil, nil, fmt.Errorf("%w: unknown dimension %q", ErrInvalidInput, dimension)
	}
	var rules []*rule
	var ops []Op
	for _, r := range g.all {
		if len(r.Key) != 1 || r.Key[0] != dimension {
			continue
		}
		tags, err := g.tags([]*rule{r}, s)
		if err != nil {
			return nil, nil, err
		}
		rules, ops = append(rules, r), append(ops, Op{Kind: kind, Spec: r.spec, Tag: tags[0], Cost: 1})
	}
	return rules, ops, nil
}

// HasAction reports whether a rule has action.
func (g *Guard) HasAction(action string) bool { return len(g.byAction[action]) > 0 }

// Actions lists the actions rules apply to, sorted.
func (g *Guard) Actions() []string {
	var out []string
	for a := range g.byAction {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// Rules returns the names of the rules that apply to req.
func (g *Guard) Rules(req Request) []string {
	var names []string
	for _, r := range g.match(req) {
		names = append(names, r.Name)
	}
	return names
}

func (g *Guard) do(ctx context.Context, st Store, ops []Op) ([]OpResult, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	res, err := st.Do(ctx, ops)
	if err != nil {
		return nil, err
	}
	if len(res) != len(ops) {
		return nil, fmt.Errorf("%w: %d results for %d operations", ErrStoreUnavailable, len(res), len(ops))
	}
	return res, nil
}

// match returns the rules of req's action whose filters req passes.
func (g *Guard) match(req Request) []*rule {
	all := g.byAction[req.Action]
	for i, r := range all {
		if !r.matches(req.Attributes) {
			// copy only when a rule is left out; the action's own list
			// is shared and never written
			out := slices.Clone(all[:i])
			for _, r := range all[i+1:] {
				if r.matches(req.Attributes) {
					out = append(out, r)
				}
			}
			return out
		}
	}
	return all
}

func (r *rule) matches(attrs map[string]string) bool {
	for k, vs := range r.When {
		v, ok := attrs[k]
		if !ok || !slices.Contains(vs, v) {
			return false
		}
	}
	return true
}

func (r *rule) result(o OpResult, member string) Result {
	res := Result{
		Rule: r.Name, Mode: r.Mode, Allowed: o.Allowed, Limit: r.Limit, Window: r.Window,
		Remaining: o.Remaining, ResetAfter: o.ResetAfter, RetryAfter: o.RetryAfter, Locked: o.Locked,
		Skipped: o.Skipped, taken: o.Taken, member: member,
	}
	if extra := r.limit - r.Limit; extra > 0 {
		res.Remaining -= extra
		res.Over = o.Allowed && !o.Skipped && res.Remaining < 0
	}
	res.Remaining = max(res.Remaining, 0)
	if res.Allowed {
		res.RetryAfter = 0
	}
	return res
}

// tags returns, for each rule, the keyed hash of the subject's values of
// the rule's dimensions, computing it once per set of dimensions.
func (g *Guard) tags(rules []*rule, s Subject) ([]string, error) {
	if err := g.hasDims(rules, s); err != nil {
		return nil, err
	}
	tags := make([]string, len(rules))
	for i := range rules {
		g.tag(rules, tags, i, s)
	}
	return tags, nil
}

// hasDims reports, as an error, a dimension some rule needs that the
// subject lacks.
func (g *Guard) hasDims(rules []*rule, s Subject) error {
	for _, r := range rules {
		for _, dim := range r.dims {
			if !has(dim, s) {
				return fmt.Errorf("rule %s: %w", r.Name, missing(dim))
			}
		}
	}
	return nil
}

// tag fills tags[i], once: the keyed hash of rule i's values, shared with
// an earlier rule on the same dimensions. The subject has every dimension
// (hasDims).
func (g *Guard) tag(rules []*rule, tags []string, i int, s Subject) string {
	if tags[i] != "" {
		return tags[i]
	}
	r := rules[i]
	if len(r.dims) == 1 && r.dims[0] == "global" {
		tags[i] = g.global
		return tags[i]
	}
	for j, o := range rules {
		if j != i && tags[j] != "" && slices.Equal(o.dims, r.dims) {
			tags[i] = tags[j]
			return tags[i]
		}
	}
	var vals [3]string
	values := vals[:0]
	for _, dim := range r.dims {
		v, _ := g.dimension(dim, s)
		values = append(values, v)
	}
	tags[i] = g.hashValues(r.dims, values)
	return tags[i]
}

// hashValues is the keyed hash of dimensions and their values: 128 bits of
// HMAC-SHA256 (the deployment secret), base64url. It is the subject's tag:
// its keys' Redis Cluster hash tag, so every rule keyed on the same
// dimensions and values shares one slot.
func (g *Guard) hashValues(dims, values []string) string {
	m := g.macs.Get().(*macState)
	b := m.buf[:0]
	for i, dim := range dims {
		b = append(b, dim...)
		b = append(b, 0)
		b = append(b, values[i]...)
		b = append(b, 0)
	}
	var out [22]byte
	base64.RawURLEncoding.Encode(out[:], m.sum(b)[:16])
	g.macs.Put(m)
	return string(out[:])
}

// valueHash names one value of a distinct rule's `of` dimension inside its
// set: 64 bits of keyed hash, enough to tell the values of one window apart.
func (g *Guard) valueHash(dim, value string) string {
	m := g.macs.Get().(*macState)
	b := append(m.buf[:0], "of\x00"...)
	b = append(b, dim...)
	b = append(b, 0)
	b = append(b, value...)
	var out [11]byte
	base64.RawURLEncoding.Encode(out[:], m.sum(b)[:8])
	g.macs.Put(m)
	return string(out[:])
}

// macState is a keyed HMAC-SHA256 with its input and output buffers, kept
// in a pool so that hashing a subject allocates nothing but the result.
type macState struct {
	h   hash.Hash
	buf []byte
	out [sha256.Size]byte
}

// sum is the HMAC of b, which becomes the state's input buffer.
func (m *macState) sum(b []byte) []byte {
	m.buf = b
	m.h.Reset()
	m.h.Write(b)
	return m.h.Sum(m.out[:0])
}

// has reports whether the subject has a value for dim (as dimension would
// find, without formatting it).
func has(dim string, s Subject) bool {
	switch dim {
	case "destination":
		return s.Destination.Key != ""
	case "country":
		return s.Destination.Country != ""
	case "prefix":
		return s.Destination.Prefix != ""
	case "account":
		return s.Account != ""
	case "ip", "ip/56", "ip/48":
		return s.IP.IsValid()
	case "global":
		return true
	}
	return false
}

func (g *Guard) dimension(dim string, s Subject) (string, error) {
	if !has(dim, s) {
		return "", missing(dim)
	}
	switch dim {
	case "destination":
		return s.Destination.Key, nil
	case "country":
		return s.Destination.Country, nil
	case "prefix":
		return s.Destination.Prefix, nil
	case "account":
		return s.Account, nil
	case "ip":
		return IPKey(s.IP, g.ipv6Bits), nil
	case "ip/56":
		return IPKey(s.IP, 56), nil
	case "ip/48":
		return IPKey(s.IP, 48), nil
	}
	return "", nil // global
}

func missing(dim string) error {
	return fmt.Errorf("%w: the request has no %s", ErrInvalidInput, dim)
}

// newID returns 96 random bits, base64url: lease and log-entry names.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
