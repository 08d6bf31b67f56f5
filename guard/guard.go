package guard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"slices"
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

// Outcome is what happened to an attempt, for failure-counting rules.
type Outcome int

// The outcomes.
const (
	Failure Outcome = iota + 1
	Success
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
	// Limit is the rule's nominal limit.
	Limit int64
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
	// policy decided.
	StoreError bool
	// Skipped reports that the rule was not evaluated because another
	// rule of the request denied first (Redis Cluster, see redisstore).
	Skipped bool
}

// Decision is the answer to [Guard.Allow].
type Decision struct {
	// Allowed reports whether every enforcing rule allowed.
	Allowed bool
	// DeniedBy names the first enforcing rule that denied; "" if allowed.
	DeniedBy string
	// RetryAfter is, when denied, the longest wait of the denying rules.
	RetryAfter time.Duration
	// Rules holds one Result per rule evaluated, in configuration order.
	Rules []Result
	// StoreError is the store's error when the store failed and the rules'
	// onStoreError policies decided (Allowed tells how).
	StoreError error
	// Lease identifies the concurrency leases taken, for [Guard.Release].
	Lease string
}

// Options configure a Guard.
type Options struct {
	// Secret keys the hash of every identifier in a store key. At least 16
	// bytes; required.
	Secret []byte
	// Backstop decides for rules with onStoreError allow while the Store
	// fails: a store private to this process (redisstore.NewMemory), so
	// each process still limits on its own. Required when a rule allows on
	// store errors.
	Backstop Store
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
}

// rule is a Rule with what every decision needs computed once.
type rule struct {
	Rule
	id    string // short hash of name and algorithm, the key's suffix
	limit int64  // effective limit: with a soft rule's overage
	allow bool   // onStoreError allow
}

// New returns a Guard for a validated configuration.
func New(cfg Config, store Store, opts Options) (*Guard, error) {
	if len(opts.Secret) < 16 {
		return nil, errors.New("guard: the key-hashing secret must be at least 16 bytes")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{
		store:    store,
		backstop: opts.Backstop,
		secret:   slices.Clone(opts.Secret),
		timeout:  cfg.Store.Timeout,
		ipv6Bits: cfg.Network.IPv6Prefix,
		byAction: map[string][]*rule{},
	}
	for _, r := range cfg.Rules {
		if r.OnStoreError == "allow" && g.backstop == nil {
			return nil, fmt.Errorf("guard: rule %s allows on store errors, which needs Options.Backstop", r.Name)
		}
		sum := sha256.Sum256([]byte(r.Name + "\x00" + string(r.Algorithm)))
		cr := &rule{Rule: r, id: base64.RawURLEncoding.EncodeToString(sum[:6]), limit: r.Limit, allow: r.OnStoreError == "allow"}
		if r.Mode == ModeSoft {
			cr.limit += int64(float64(r.Limit) * float64(r.Overage))
		}
		g.byAction[r.Action] = append(g.byAction[r.Action], cr)
	}
	return g, nil
}

// Allow decides whether req may proceed and, if so, consumes one unit of
// every request-counting rule of its action; failure-counting rules are only
// checked (see [Guard.Record]). A denied request consumes nothing.
func (g *Guard) Allow(ctx context.Context, req Request) (Decision, error) {
	return g.AllowN(ctx, req, 1)
}

// AllowN is Allow for n units.
func (g *Guard) AllowN(ctx context.Context, req Request, n int64) (Decision, error) {
	if n < 1 {
		return Decision{}, fmt.Errorf("guard: cost %d: %w", n, ErrInvalidInput)
	}
	rules := g.match(req)
	lease := ""
	if slices.ContainsFunc(rules, func(r *rule) bool { return r.Algorithm == Concurrency }) {
		lease = newID()
	}
	ops := make([]Op, len(rules))
	for i, r := range rules {
		kind := Take
		if r.Count == CountFailures {
			kind = Peek
		}
		op, err := g.op(r, req, kind, n)
		if err != nil {
			return Decision{}, err
		}
		if r.Algorithm == Concurrency {
			op.Member = lease
		}
		ops[i] = op
	}
	d := Decision{Allowed: true, Rules: make([]Result, len(rules)), Lease: lease}
	if len(ops) == 0 {
		return d, nil
	}
	res, err := g.do(ctx, ops)
	if err != nil {
		d.StoreError = err
		res = g.fallback(ctx, rules, ops)
	}
	for i, r := range rules {
		d.Rules[i] = r.result(res[i])
		if err != nil {
			d.Rules[i].StoreError = true
		}
		if !d.Rules[i].Allowed && r.Mode != ModeShadow {
			if d.Allowed {
				d.Allowed, d.DeniedBy = false, r.Name
			}
			d.RetryAfter = max(d.RetryAfter, d.Rules[i].RetryAfter)
		}
	}
	return d, nil
}

// fallback decides while the store fails: rules with onStoreError deny
// deny; rules with allow go to the in-process backstop, which limits each
// process on its own.
func (g *Guard) fallback(ctx context.Context, rules []*rule, ops []Op) []OpResult {
	res := make([]OpResult, len(ops))
	var idx []int
	var back []Op
	for i, r := range rules {
		if r.allow {
			idx, back = append(idx, i), append(back, ops[i])
		} else {
			res[i] = OpResult{Allowed: false, RetryAfter: time.Second}
		}
	}
	if len(back) > 0 {
		br, err := g.backstop.Do(ctx, back)
		for j, i := range idx {
			if err != nil {
				res[i] = OpResult{Allowed: false, RetryAfter: time.Second}
			} else {
				res[i] = br[j]
			}
		}
	}
	return res
}

// Record reports the outcome of an allowed attempt to the failure-counting
// rules of its action: a Failure counts (and may start a lockout), a
// Success clears the rules with resetOnSuccess.
func (g *Guard) Record(ctx context.Context, req Request, outcome Outcome) ([]Result, error) {
	var rules []*rule
	var ops []Op
	for _, r := range g.match(req) {
		var kind OpKind
		switch {
		case r.Count != CountFailures:
			continue
		case outcome == Failure:
			kind = Fail
		case outcome == Success && r.ResetOnSuccess:
			kind = Clear
		default:
			continue
		}
		op, err := g.op(r, req, kind, 1)
		if err != nil {
			return nil, err
		}
		rules, ops = append(rules, r), append(ops, op)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	res, err := g.do(ctx, ops)
	if err != nil {
		return nil, fmt.Errorf("record %s outcome: %w", req.Action, err)
	}
	out := make([]Result, len(rules))
	for i, r := range rules {
		out[i] = r.result(res[i])
	}
	return out, nil
}

// Release gives back the concurrency leases that the decision with lease
// took for req.
func (g *Guard) Release(ctx context.Context, req Request, lease string) error {
	var ops []Op
	for _, r := range g.match(req) {
		if r.Algorithm != Concurrency {
			continue
		}
		op, err := g.op(r, req, Release, 1)
		if err != nil {
			return err
		}
		op.Member = lease
		ops = append(ops, op)
	}
	if len(ops) == 0 || lease == "" {
		return nil
	}
	if _, err := g.do(ctx, ops); err != nil {
		return fmt.Errorf("release %s lease: %w", req.Action, err)
	}
	return nil
}

// Rules returns the names of the rules that apply to req.
func (g *Guard) Rules(req Request) []string {
	var names []string
	for _, r := range g.match(req) {
		names = append(names, r.Name)
	}
	return names
}

func (g *Guard) do(ctx context.Context, ops []Op) ([]OpResult, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	res, err := g.store.Do(ctx, ops)
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
	var out []*rule
	for _, r := range g.byAction[req.Action] {
		if r.matches(req.Attributes) {
			out = append(out, r)
		}
	}
	return out
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

func (r *rule) result(o OpResult) Result {
	res := Result{
		Rule: r.Name, Mode: r.Mode, Allowed: o.Allowed, Limit: r.Limit,
		Remaining: o.Remaining, ResetAfter: o.ResetAfter, RetryAfter: o.RetryAfter, Locked: o.Locked,
		Skipped: o.Skipped,
	}
	if extra := r.limit - r.Limit; extra > 0 {
		res.Remaining -= extra
		res.Over = o.Allowed && res.Remaining < 0
	}
	res.Remaining = max(res.Remaining, 0)
	if res.Allowed {
		res.RetryAfter = 0
	}
	return res
}

// op builds the operation of rule r for req.
func (g *Guard) op(r *rule, req Request, kind OpKind, cost int64) (Op, error) {
	tag, err := g.subjectHash(r, req.Subject)
	if err != nil {
		return Op{}, err
	}
	key := "og:{" + tag + "}:" + r.id
	op := Op{
		Kind: kind, Algorithm: r.Algorithm, Key: key, Limit: r.limit, Window: r.Window,
		Cost: cost, Enforce: r.Mode != ModeShadow && (kind == Take || kind == Peek),
	}
	if r.Algorithm == SlidingLog {
		op.Member = newID() // names this request's log entries
	}
	if r.Lockout != nil {
		op.LockKey, op.StrikeKey, op.Lockout = key+":l", key+":s", r.Lockout
	}
	return op, nil
}

// subjectHash is the keyed hash of the rule's dimensions' values: 128 bits
// of HMAC-SHA256, base64url. It is the key's hash tag, so every rule keyed
// on the same dimensions and values shares one Redis Cluster slot.
func (g *Guard) subjectHash(r *rule, s Subject) (string, error) {
	m := hmac.New(sha256.New, g.secret)
	for _, dim := range r.Key {
		v, err := g.dimension(dim, s)
		if err != nil {
			return "", fmt.Errorf("rule %s: %w", r.Name, err)
		}
		m.Write([]byte(dim))
		m.Write([]byte{0})
		m.Write([]byte(v))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16]), nil
}

func (g *Guard) dimension(dim string, s Subject) (string, error) {
	var v string
	switch dim {
	case "destination":
		v = s.Destination.Key
	case "country":
		v = s.Destination.Country
	case "prefix":
		v = s.Destination.Prefix
	case "account":
		v = s.Account
	case "ip":
		if s.IP.IsValid() {
			v = IPKey(s.IP, g.ipv6Bits)
		}
	case "ip/56", "ip/48":
		if s.IP.IsValid() {
			bits := 56
			if dim == "ip/48" {
				bits = 48
			}
			v = IPKey(s.IP, bits)
		}
	case "global":
		return "", nil
	}
	if v == "" {
		return "", fmt.Errorf("%w: the request has no %s", ErrInvalidInput, dim)
	}
	return v, nil
}

// newID returns 96 random bits, base64url: lease and log-entry names.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
