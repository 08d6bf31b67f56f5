package guard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// Subject is who or what a request is about. Parse its fields with
// guard/identity (ParseEmail, ParsePhone, ParseIP, ParseAccount); a rule keyed on a
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
	// Locked reports that a lockout denies; LockedUntil is then the
	// store's time when it ends: the same instant for every request that
	// meets that lockout (it names the lockout).
	Locked      bool
	LockedUntil time.Time
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

// Decision is the answer to [Guard.Allow].
type Decision struct {
	// Allowed reports whether every enforcing rule allowed.
	Allowed bool
	// DeniedBy names the first enforcing rule that denied; "" if allowed.
	DeniedBy string
	// RetryAfter is, when denied, the longest wait of the denying rules.
	RetryAfter time.Duration
	// Rules holds one Result per rule of the action, in configuration order.
	// Read it only: a denial answered from the deny cache (its Result
	// Cached) shares its Rules with the entry's other answers for up to
	// 100ms, so that an attacker's repeats allocate nothing; clone it to
	// change it (a change would show in other callers' decisions). In
	// those Rules, the denying rule's RetryAfter and ResetAfter are as of
	// the first of them (Decision.RetryAfter is exact).
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
	Backstop store.Backstop
	// Clock reads this process's monotonic clock for the deny cache and
	// leases, which measure only durations the store reported. Default
	// time.Now. Rule windows always run on the store's clock.
	Clock func() time.Time
	// StoreClock, when set, learns the store's time from its answers;
	// give the Backstop its Now (memstore.New(clock.Now)) so that both
	// count in the same time.
	StoreClock *store.Clock
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
	store     store.Store
	backstop  store.Backstop
	secret    []byte
	timeout   time.Duration
	ipv6Bits  int
	byAction  map[string][]*rule
	lists     sync.Map     // listKey → []*rule: the lists match kept
	listsKept atomic.Int64 // their number (and the tries past maxLists)
	actions   []string     // byAction's keys, sorted
	byName    map[string]*rule
	all       []*rule
	clock     func() time.Time
	macs      sync.Pool // keyed HMAC-SHA256 states
	global    string    // the tag of the global dimension, hashed once
	cache     *denyCache
	memo      *tagMemo // the tags of the subjects cache holds denials of
	leases    *leases
	storeClk  *store.Clock
	unblocked func(ctx context.Context, states []State)
	networks  Networks
	devices   devices
}

// rule is a Rule with what every decision needs computed once.
type rule struct {
	Rule
	spec  *store.Spec
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

// New returns a Guard for a validated configuration (config.Parse
// validates one, and its Engine method gives it). It refuses what the
// engine cannot run: see [Config].
func New(cfg Config, st store.Store, opts Options) (*Guard, error) {
	if len(opts.Secret) < 16 {
		return nil, errors.New("guard: the key-hashing secret must be at least 16 bytes")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	g := &Guard{
		store:     st,
		backstop:  opts.Backstop,
		secret:    slices.Clone(opts.Secret),
		timeout:   cfg.StoreTimeout,
		ipv6Bits:  cfg.IPv6Prefix,
		byAction:  map[string][]*rule{},
		byName:    map[string]*rule{},
		clock:     opts.Clock,
		leases:    &leases{m: map[string]*lease{}},
		storeClk:  opts.StoreClock,
		unblocked: opts.Unblocked,
		networks:  opts.Networks,
	}
	g.devices = newDevices(g.secret, cfg.DeviceTTL)
	g.macs.New = func() any { return &macState{h: hmac.New(sha256.New, g.secret)} }
	if cfg.DenyCacheTTL > 0 {
		g.cache = newDenyCache(cfg.DenyCacheTTL, cfg.DenyCacheSize)
		g.memo = newTagMemo(cfg.DenyCacheSize)
	}
	packs := packing(cfg.Rules)
	for _, r := range cfg.Rules {
		if r.OnStoreError == "allow" && g.backstop == nil {
			return nil, fmt.Errorf("guard: rule %s allows on store errors, which needs Options.Backstop", r.Name)
		}
		if (slices.Contains(r.Key, "asn") || r.Of == "asn") && g.networks == nil {
			return nil, fmt.Errorf("guard: rule %s uses the asn dimension, which needs Options.Networks (network.asnDatabase)", r.Name)
		}
		cr := compile(r, packs)
		g.byAction[r.Action] = append(g.byAction[r.Action], cr)
		g.byName[r.Name] = cr
		g.all = append(g.all, cr)
	}
	g.actions = slices.Sorted(maps.Keys(g.byAction))
	g.global = g.hashValues([]string{"global"}, []string{""})
	return g, nil
}

// compile is a rule as the engine runs it: its limit (a soft rule's
// overage added), the device filters, and the spec the stores apply
// (packed with the rules keyed alike when packs says so).
func compile(r Rule, packs map[string]time.Duration) *rule {
	cr := &rule{Rule: r, limit: r.Limit, allow: r.OnStoreError == "allow", dims: slices.Sorted(slices.Values(r.Key)),
		owned:       slices.Contains(r.Key, "destination") || slices.Contains(r.Key, "account") || slices.Contains(r.Key, "device"),
		keyedDevice: slices.Contains(r.Key, "device"), onTrusted: true, onUntrusted: true}
	if vs, ok := r.When["device"]; ok {
		cr.filtersDevice = true
		cr.onTrusted, cr.onUntrusted = slices.Contains(vs, DeviceTrusted), slices.Contains(vs, DeviceUntrusted)
	}
	if r.Mode == ModeSoft {
		cr.limit += int64(float64(r.Limit) * r.Overage)
	}
	cr.spec = &store.Spec{ID: ruleID(r.Name, r.Algorithm), Algorithm: r.Algorithm, Limit: cr.limit, Window: r.Window,
		Enforce: r.Mode != ModeShadow, Challenge: r.Mode == ModeChallenge, Failures: r.Count == CountFailures,
		Keep: r.Remember, Lockout: r.Lockout, Min: r.Min}
	if r.Elastic != nil {
		cr.spec.Elastic = r.Elastic.Ratio
	}
	if ttl, ok := packs[dimsKey(r.Key)]; ok && packable(r.Algorithm) {
		cr.spec.Packed, cr.spec.PackTTL = true, ttl
	}
	return cr
}

// packing decides which rules share a packed hash: those of the packable
// algorithms keyed on the same dimensions, when there are at least two
// (one rule alone is cheaper as a plain key). It returns the hash's TTL per
// set of dimensions: the longest state its rules keep.
func packing(rules []Rule) map[string]time.Duration {
	count := map[string]int{}
	ttl := map[string]time.Duration{}
	for _, r := range rules {
		if !packable(r.Algorithm) {
			continue
		}
		k := dimsKey(r.Key)
		count[k]++
		keep := r.Window
		if r.Algorithm == store.SlidingWindow || r.Algorithm == store.Ratio {
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

// Actions lists the actions rules apply to, sorted.
func (g *Guard) Actions() []string { return slices.Clone(g.actions) }
