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
	"strconv"
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
	// ASN is the client's autonomous system when it is known without an
	// IP (an administrator's lookup by AS number); else the asn dimension
	// looks the IP up in Options.Networks.
	ASN uint32

	device string // the device id of a token verified for Account ("": untrusted)
}

// Request is one attempt at an action.
type Request struct {
	Action  string
	Subject Subject
	// Attributes are matched by the rules' `when` filters (channel,
	// purpose). The device attribute is the guard's: it follows from
	// Device, whatever Attributes say.
	Attributes map[string]string
	// Device is the device token the client presented, or "". A token
	// the guard issued for Subject.Account (see [Guard.DeviceToken]),
	// unexpired and not revoked, makes the request's device attribute
	// trusted; any other (forged, expired, revoked, another account's)
	// leaves it untrusted, never an error.
	Device string
	// Partial leaves out the rules on a dimension the subject lacks,
	// instead of answering ErrInvalidInput: Cognito's triggers carry no
	// client IP, and their rules keyed on ip (or its networks) are
	// skipped unless a trusted backend passes the address.
	Partial bool
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
	// Void: the attempt never happened, or failed through no doing of
	// the subject's (the authenticator or the message provider failed, a
	// code could not be stored): everything the decision took, of every
	// rule, is given back.
	Void
	// Stray: the attempt failed against nothing the subject owns (an OTP
	// guess when no code is pending). It is given back to the rules keyed
	// on destination or account, so strangers cannot use up an owner's
	// budget, and stays a Failure for the others (IP, global).
	Stray
	// Held: the attempt's password was right and it waits for a proof
	// given in another request (a step-up code); [Guard.HeldReceipt] is
	// what the proof settles. It stays a
	// failure on the rules keyed on what the account owns and counts on
	// the count: held rules; it is given back to the others (IP,
	// network: a right password is no failure of theirs) and what it
	// would mark as proven (a count: successes value) waits.
	Held
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
	// Challenged reports that a rule in mode challenge would have denied:
	// the request is asked for a proof. What the rule would take waits
	// for it ([Guard.Prove], or a Success); a failure-counting rule
	// counts the attempt as a failure at once, as any of its attempts.
	Challenged bool
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

	taken  int64     // units the store consumed for this rule
	tag    string    // the subject's tag the rule was applied to
	member string    // the entry a set algorithm added
	at     time.Time // the store's clock (its node's) when it applied the rule: what a refund names
}

// LockedUntil is, for a result that reports a lockout, the store's time
// when it ends: the same instant for every request that meets that
// lockout (it names the lockout). Zero when not locked.
func (r Result) LockedUntil() time.Time {
	if !r.Locked || r.at.IsZero() {
		return time.Time{}
	}
	return r.at.Add(r.RetryAfter)
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
	// Device is the request's device attribute: trusted or untrusted.
	Device string
	// Challenged reports that an allowed request must prove itself (a
	// rule in mode challenge would have denied it); ChallengedBy names
	// the first such rule, and Fallback is its fallback.
	Challenged             bool
	ChallengedBy, Fallback string
}

// Options configure a Guard.
type Options struct {
	// Secret keys the hash of every identifier in a store key. At least 16
	// bytes; required.
	Secret []byte
	// Backstop decides for rules with onStoreError allow while the Store
	// fails: a copy of the store's state in this process
	// (memstore.New), kept to what the store answers and never asked
	// while it answers. Required when a rule allows on store errors.
	Backstop Backstop
	// Clock reads this process's monotonic clock for the deny cache and
	// leases, which measure only durations the store reported. Default
	// time.Now. Rule windows always run on the store's clock.
	Clock func() time.Time
	// StoreClock, when set, learns the store's time from its answers;
	// give the Backstop its Now (memstore.New(clock.Now)) so that both
	// count in the same time.
	StoreClock *StoreClock
	// Unblocked, when set, is told the states an Unblock cleared, so that
	// other processes forget their copies of them (see [Guard.Forget]).
	Unblocked func(ctx context.Context, states []State)
	// Networks finds a client IP's autonomous system, for the asn
	// dimension (asndb.Open). Required when a rule uses asn.
	Networks Networks
}

// Networks maps an address to its autonomous system.
type Networks interface {
	// ASN returns the address's autonomous system number, or false when
	// the database does not know the address.
	ASN(netip.Addr) (uint32, bool)
}

// State names one rule's state for one subject, without the subject: the
// rule's id and the subject's keyed hash.
type State struct{ ID, Tag string }

// Guard evaluates the configured rules of an action against a Store.
// It is safe for concurrent use.
type Guard struct {
	store     Store
	backstop  Backstop
	secret    []byte
	timeout   time.Duration
	ipv6Bits  int
	byAction  map[string][]*rule
	byName    map[string]*rule
	all       []*rule
	clock     func() time.Time
	macs      sync.Pool // keyed HMAC-SHA256 states
	global    string    // the tag of the global dimension, hashed once
	cache     *denyCache
	leases    *leases
	storeClk  *StoreClock
	unblocked func(ctx context.Context, states []State)
	networks  Networks
	devices   devices
}

// rule is a Rule with what every decision needs computed once.
type rule struct {
	Rule
	spec  *Spec
	dims  []string // Key, sorted: the order a rule lists them in does not matter
	limit int64    // effective limit: with a soft rule's overage
	allow bool     // onStoreError allow
	owned bool     // keyed on destination or account (see Stray)
	// on the device: keyed on it, or filtered by it (the trusted and
	// untrusted values it applies to)
	keyedDevice            bool
	onTrusted, onUntrusted bool
	filtersDevice          bool
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
		store:     store,
		backstop:  opts.Backstop,
		secret:    slices.Clone(opts.Secret),
		timeout:   cfg.Store.Timeout,
		ipv6Bits:  cfg.Network.IPv6Prefix,
		byAction:  map[string][]*rule{},
		byName:    map[string]*rule{},
		clock:     opts.Clock,
		leases:    &leases{m: map[string]*lease{}},
		storeClk:  opts.StoreClock,
		unblocked: opts.Unblocked,
		networks:  opts.Networks,
	}
	g.devices = newDevices(g.secret, cfg.Devices.TTL)
	g.macs.New = func() any { return &macState{h: hmac.New(sha256.New, g.secret)} }
	if cfg.Store.DenyCache.TTL > 0 {
		g.cache = newDenyCache(cfg.Store.DenyCache.TTL, cfg.Store.DenyCache.Size)
	}
	packs := packing(cfg.Rules)
	for _, r := range cfg.Rules {
		if r.OnStoreError == "allow" && g.backstop == nil {
			return nil, fmt.Errorf("guard: rule %s allows on store errors, which needs Options.Backstop", r.Name)
		}
		if (slices.Contains(r.Key, "asn") || r.Of == "asn") && g.networks == nil {
			return nil, fmt.Errorf("guard: rule %s uses the asn dimension, which needs Options.Networks (network.asnDatabase)", r.Name)
		}
		cr := &rule{Rule: r, limit: r.Limit, allow: r.OnStoreError == "allow", dims: slices.Sorted(slices.Values(r.Key)),
			owned:       slices.Contains(r.Key, "destination") || slices.Contains(r.Key, "account") || slices.Contains(r.Key, "device"),
			keyedDevice: slices.Contains(r.Key, "device"), onTrusted: true, onUntrusted: true}
		if vs, ok := r.When["device"]; ok {
			cr.filtersDevice = true
			cr.onTrusted, cr.onUntrusted = slices.Contains(vs, DeviceTrusted), slices.Contains(vs, DeviceUntrusted)
		}
		if r.Mode == ModeSoft {
			cr.limit += int64(float64(r.Limit) * float64(r.Overage))
		}
		cr.spec = &Spec{ID: ruleID(r.Name, r.Algorithm), Algorithm: r.Algorithm, Limit: cr.limit, Window: r.Window,
			Enforce: r.Mode != ModeShadow, Challenge: r.Mode == ModeChallenge, Failures: r.Count == CountFailures,
			Keep: r.Remember, Lockout: r.Lockout, Min: r.Min}
		if r.Elastic != nil {
			cr.spec.Elastic = float64(r.Elastic.Ratio)
		}
		if ttl, ok := packs[dimsKey(r.Key)]; ok && r.Algorithm.packable() {
			cr.spec.Packed, cr.spec.PackTTL = true, ttl
		}
		g.byAction[r.Action] = append(g.byAction[r.Action], cr)
		g.byName[r.Name] = cr
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
		if r.Algorithm == SlidingWindow || r.Algorithm == Ratio {
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

// AllowN is Allow for n units. It runs in five steps (see the package
// comment): a denial this process remembers answers at once; else the
// ops are planned (a lease may pay locally), the store decides (the
// backstop only when the store fails), the results become the decision,
// and the leases and the deny cache learn from it.
func (g *Guard) AllowN(ctx context.Context, req Request, n int64) (Decision, error) {
	if n < 1 {
		return Decision{}, fmt.Errorf("guard: cost %d: %w", n, ErrInvalidInput)
	}
	a := attempt{g: g, subject: req.Subject, n: n}
	a.subject.device = ""
	if id, issued, ok := g.devices.verify(req.Device, req.Subject.Account); ok {
		a.subject.device, a.issued = id, issued
	}
	a.rules = g.match(req, a.subject.device != "")
	a.maybe = a.subject.device != "" && dependsOnDevice(a.rules)
	if !a.maybe {
		a.subject.device = "" // nothing asks: the device counts as untrusted
	}
	if len(a.rules) == 0 {
		return Decision{Allowed: true, Rules: []Result{}}, nil
	}
	if err := g.hasDims(a.rules, req.Subject); err != nil {
		return Decision{}, err
	}
	a.now = g.clock()
	rules := a.rules
	if len(rules) <= len(a.tagBuf) {
		a.tags = a.tagBuf[:len(rules)]
	} else {
		a.tags = make([]string, len(rules))
	}
	if d, ok := a.remembered(); ok {
		return d, nil
	}
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

// dependsOnDevice reports whether a rule is filtered or keyed on the
// device.
func dependsOnDevice(rules []*rule) bool {
	for _, r := range rules {
		if r.filtersDevice || r.keyedDevice {
			return true
		}
	}
	return false
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
	now     time.Time // the process's clock: the deny cache and leases
	tagBuf  [8]string // most actions have a few rules: no allocation
	tags    []string  // per rule, filled as needed (see tag)
	d       Decision
	ops     []Op
	at      []int    // the rule of each op (-1: the device check)
	local   []int    // the rules paid from this process's lease
	refills []string // the leases this attempt refills from the store
	res     []OpResult
	err     error // the store's
	// cancelled: the store failed because the caller's context ended
	cancelled bool
}

// remembered is step 1: a denial this process remembers (the deny cache)
// answers without the store, rule by rule, hashing only as far as the
// first remembered denial, so an attacker's repeat costs one keyed hash.
func (a *attempt) remembered() (Decision, bool) {
	g := a.g
	if g.cache == nil {
		return Decision{}, false
	}
	for i, r := range a.rules {
		if !r.cacheable() || (a.maybe && (r.filtersDevice || r.keyedDevice)) {
			continue
		}
		if res, ok := g.cache.get(a.cacheKey(i), a.now); ok {
			return g.cached(a.rules, i, res), true
		}
	}
	return Decision{}, false
}

// cacheKey names rule i's state for this subject in the deny cache: the
// rule's id and the subject's tag, and for a distinct rule the value too
// (a value already seen is admitted where a new one is denied).
func (a *attempt) cacheKey(i int) string {
	r := a.rules[i]
	k := r.spec.ID + a.tag(i)
	if r.Algorithm == Distinct {
		v, _ := a.g.dimension(r.Of, a.subject)
		k += ":" + a.g.valueHash(r.Of, v)
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
	a.ops, a.at = make([]Op, 0, len(a.rules)+1), make([]int, 0, len(a.rules)+1)
	if a.maybe {
		a.d.Device = ""
		a.applied = make([]bool, len(a.rules))
		a.ops = append(a.ops, Op{Kind: DeviceCheck, Spec: g.devices.spec, Tag: g.deviceTag(a.subject.Account), Cost: 1, At: a.issued})
		a.at = append(a.at, -1)
	}
	for i, r := range a.rules {
		op := Op{Kind: Take, Spec: r.spec, Tag: a.tag(i), Cost: a.n}
		dependent := a.maybe && (r.filtersDevice || r.keyedDevice)
		switch r.Algorithm {
		case Concurrency:
			if a.d.Lease == "" {
				a.d.Lease = newID()
			}
			op.Member = a.d.Lease
		case SlidingLog:
			op.Member = newID() // names this request's log entries
		case Distinct:
			v, err := g.dimension(r.Of, a.subject)
			if err != nil {
				a.refilled()
				return fmt.Errorf("rule %s: %w", r.Name, err)
			}
			op.Member = g.valueHash(r.Of, v)
		}
		if dependent {
			// one op per value of the device the rule applies to; the
			// store's device check picks the one that applies
			if r.onTrusted {
				t := op
				t.Cond = CondTrusted
				a.ops, a.at = append(a.ops, t), append(a.at, i)
			}
			if r.onUntrusted {
				u := op
				u.Cond = CondUntrusted
				if r.keyedDevice {
					s := a.subject
					s.device = ""
					u.Tag = g.tag([]*rule{r}, make([]string, 1), 0, s)
				}
				a.ops, a.at = append(a.ops, u), append(a.at, i)
			}
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
		if g.storeClk != nil && len(a.res) > 0 {
			g.storeClk.observe(a.res[0].Now)
		}
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
func (g *Guard) backedOps(rules []*rule, at []int, ops []Op) []Op {
	if g.backstop == nil {
		return nil
	}
	var out []Op
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
				g.cache.put(a.cacheKey(i), res, a.now)
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

// cacheable reports whether r's denials may be answered from the deny
// cache until their retry-after: only those time alone ends. Concurrency
// leases are released at any moment; a failure count drops when an
// attempt in flight succeeds; and a lockout, which an administrator may
// lift, is always asked of the store (a login is worth a round trip: the
// unblocked owner logs in at once, through any process).
func (r *rule) cacheable() bool {
	return r.spec.Enforce && !r.spec.Challenge && r.Algorithm != Concurrency && r.Count == CountRequests && r.Lockout == nil
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

// mirror tells the backstop what the store answered for the ops of the
// rules that fall back on it.
func (g *Guard) mirror(rules []*rule, at []int, ops []Op, res []OpResult) {
	if g.backstop == nil {
		return
	}
	var mo []Op
	var mr []OpResult
	for j, i := range at {
		if i >= 0 && rules[i].allow {
			op := ops[j]
			op.Extra = 0
			mo, mr = append(mo, op), append(mr, res[j])
		}
	}
	if len(mo) > 0 {
		g.backstop.Mirror(mo, mr)
	}
}

// fallback is the decision's results when the store failed: when every
// enforcing rule allows on store errors, the backstop decides them (one
// atomic batch, from the state the store last answered); otherwise the
// request is denied and nothing is counted.
func (g *Guard) fallback(ctx context.Context, rules []*rule, at []int, ops []Op) []OpResult {
	res := make([]OpResult, len(ops))
	for j := range res {
		res[j] = OpResult{Allowed: false, RetryAfter: time.Second}
	}
	var bo []Op
	var idx []int
	for j, i := range at {
		if i < 0 { // the device check: the backstop knows this process's revocations
			bo, idx = append(bo, ops[j]), append(idx, j)
			continue
		}
		r := rules[i]
		if r.spec.Enforce && !r.allow {
			return res // this rule denies on store errors: so does the request
		}
		if r.allow {
			op := ops[j]
			op.Extra = 0
			bo, idx = append(bo, op), append(idx, j)
		}
	}
	if len(bo) == 0 || g.backstop == nil || (len(bo) == 1 && at[idx[0]] < 0) {
		return res
	}
	br, err := g.do(ctx, g.backstop, bo)
	if err != nil {
		return res
	}
	for k, j := range idx {
		res[j] = br[k]
		if i := at[j]; i >= 0 && rules[i].spec.Challenge && rules[i].Algorithm == Distinct {
			// what the set held (an account's proven networks) is Redis's
			// alone: the backstop's copy cannot say a value was seen, so
			// the request is asked for its proof
			res[j] = OpResult{Challenged: true, Now: br[k].Now}
		}
	}
	return res
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

// Rules returns the names of the rules that may apply to req (with a
// device token, those of both device values).
func (g *Guard) Rules(req Request) []string {
	var names []string
	for _, r := range g.match(req, req.Device != "") {
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

// match returns the rules of req's action whose filters req passes. The
// device attribute is untrusted, unless maybe (a token the store is to
// judge): then a rule filtered on the device passes with either value.
func (g *Guard) match(req Request, maybe bool) []*rule {
	all := g.byAction[req.Action]
	if req.Partial {
		all = slices.DeleteFunc(slices.Clone(all), func(r *rule) bool {
			return (r.Of != "" && !has(r.Of, req.Subject)) || slices.ContainsFunc(r.dims, func(dim string) bool { return !has(dim, req.Subject) })
		})
	}
	for i, r := range all {
		if !r.matches(req.Attributes, maybe) {
			// copy only when a rule is left out; the action's own list
			// is shared and never written
			out := slices.Clone(all[:i])
			for _, r := range all[i+1:] {
				if r.matches(req.Attributes, maybe) {
					out = append(out, r)
				}
			}
			return out
		}
	}
	return all
}

func (r *rule) matches(attrs map[string]string, maybe bool) bool {
	for k, vs := range r.When {
		if k == "device" {
			if !maybe && !r.onUntrusted {
				return false
			}
			continue
		}
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
		Challenged: o.Challenged, Skipped: o.Skipped, taken: o.Taken, member: member, at: o.Now,
	}
	if extra := r.limit - r.Limit; extra > 0 {
		res.Remaining -= extra
		res.Over = o.Allowed && !o.Skipped && res.Remaining < 0
	}
	res.Remaining = max(res.Remaining, 0)
	if res.Allowed || res.Challenged {
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
	case "ip", "ip/56", "ip/48", "ip/24", "ip/16":
		return s.IP.IsValid()
	case "asn":
		return s.ASN != 0 || s.IP.IsValid()
	case "device":
		return s.Account != ""
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
	case "ip/24":
		return NetKey(s.IP, 24, 48), nil
	case "ip/16":
		return NetKey(s.IP, 16, 32), nil
	case "asn":
		if s.ASN != 0 {
			return "AS" + strconv.FormatUint(uint64(s.ASN), 10), nil
		}
		if g.networks != nil {
			if n, ok := g.networks.ASN(s.IP); ok {
				return "AS" + strconv.FormatUint(uint64(n), 10), nil
			}
		}
		// an address the database does not know counts as its network
		return NetKey(s.IP, 16, 48), nil
	case "device":
		// one state per (account, trusted device); the untrusted share one
		return DeviceAccount(s.Account) + "\x00" + s.device, nil
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

// Value is the subject's value of a dimension as the guard keys it
// (normalized; a network for ip/24 and the like), "" when it has none:
// for fingerprints in logs and events, never stored in clear.
func (g *Guard) Value(dim string, s Subject) string {
	v, _ := g.dimension(dim, s)
	return v
}
