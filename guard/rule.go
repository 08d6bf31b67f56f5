package guard

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Rule is one rate limit. See docs/contract.md §5 for the meaning of each field.
type Rule struct {
	// Name identifies the rule in decisions, logs and metrics; unique.
	Name string `yaml:"name"`
	// Action is what the rule applies to: otp.send, otp.verify, login,
	// signup or any custom action name.
	Action string `yaml:"action"`
	// Key lists the dimensions the rule counts by (see [Dimensions]).
	Key []string `yaml:"key"`
	// Of is, for the distinct algorithm, the dimension whose distinct
	// values are counted per key (for example account per ip).
	Of string `yaml:"of"`
	// Limit is how many requests (or failures) the window admits; for
	// the ratio algorithm, the failure ratio that denies, written as a
	// percentage ("80%").
	Limit int64 `yaml:"limit"`
	// Min is, for the ratio algorithm, how many attempts the window must
	// have seen before the ratio may deny. Default 20.
	Min int64 `yaml:"min"`
	// Window is the period the limit applies to; for concurrency, how long
	// a lease lives before it expires on its own.
	Window time.Duration `yaml:"window"`
	// Algorithm is one of [Algorithms]. Default fixed_window.
	Algorithm Algorithm `yaml:"algorithm"`
	// Count is "requests" (default), "failures" (an admitted attempt
	// counts as a failure until it succeeds), "held" (an attempt counts
	// while it waits for a proof it has not given, a right password held
	// for a step-up code: taken at admission, given back when it fails,
	// and every count cleared when one succeeds) or, for the distinct
	// algorithm, "successes" (a value counts once an attempt with it
	// succeeds: taken at admission, given back when the attempt fails).
	Count string `yaml:"count"`
	// Remember is, for the distinct algorithm, how many values the set
	// keeps (default: limit). A new value is admitted while fewer than
	// limit are held; a challenge rule's proven values are remembered
	// beyond it, up to remember (the networks an account proved).
	Remember int64 `yaml:"remember"`
	// Mode is "enforce" (default), "shadow" or "soft".
	Mode string `yaml:"mode"`
	// Overage is how far above Limit a soft rule still allows, as a
	// fraction ("10%" or 0.1). Only with mode soft; default 10%.
	Overage Percent `yaml:"overage"`
	// When restricts the rule to requests whose attributes match: each
	// attribute must equal one of the listed values.
	When map[string]StringList `yaml:"when"`
	// Lockout, with count failures, locks the subject out when failures
	// reach Limit, for progressively longer periods.
	Lockout *Lockout `yaml:"lockout"`
	// ResetOnSuccess, with count failures, clears the failure counter when
	// the action succeeds.
	ResetOnSuccess bool `yaml:"resetOnSuccess"`
	// OnStoreError is "deny" or "allow" (with the in-process backstop).
	// Default deny, except allow for the login and signup actions.
	OnStoreError string `yaml:"onStoreError"`
	// Lease lets each process take blocks of the rule's units from Redis
	// and spend them locally (fixed_window, requests, enforce only): for
	// rules every request shares, such as global caps.
	Lease *Lease `yaml:"lease"`
	// Elastic lets a sliding_window rule with count failures admit more
	// as its verified traffic grows: its limit becomes max(limit, ratio ×
	// the successes on the same key in the window).
	Elastic *Elastic `yaml:"elastic"`
	// Fallback is, for a login rule in mode challenge, what happens to
	// an account that has no verified address to send a step-up code to:
	// deny (the default) or allow.
	Fallback string `yaml:"fallback"`

	percent bool // Limit was written as a percentage
}

// Elastic is a limit that follows verified traffic (see [Rule.Elastic]).
type Elastic struct {
	// Ratio is the share of the window's successes that becomes the
	// limit, when that is more than the rule's own ("20%").
	Ratio Percent `yaml:"ratio"`
}

// MarshalYAML writes a rule back as it was read (a ratio's limit with
// its percent sign).
func (r Rule) MarshalYAML() (any, error) {
	type plain Rule
	var n yaml.Node
	if err := n.Encode(plain(r)); err != nil {
		return nil, err
	}
	if r.percent {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "limit" {
				n.Content[i+1].Value += "%"
				n.Content[i+1].Tag = "!!str"
			}
		}
	}
	return &n, nil
}

// Lease sizes a rule's quota leases: a process takes up to Units at once
// (never more than a quarter of what the limit leaves) and spends them
// without asking Redis until they run out or the window ends.
type Lease struct {
	Units int64 `yaml:"units"`
}

// Lockout is a progressive lockout: the first lasts Initial, each further
// one of the same subject Factor times longer, up to Max. A subject's
// lockout count is forgotten after Reset without a lockout.
type Lockout struct {
	Initial time.Duration `yaml:"initial"`
	Factor  float64       `yaml:"factor"`
	Max     time.Duration `yaml:"max"`
	// Reset is how long the lockout count is remembered. Default 24h.
	Reset time.Duration `yaml:"reset"`
}

// Percent is a fraction written as "10%" or 0.1.
type Percent float64

// UnmarshalYAML accepts "10%" and plain numbers.
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSpace(n.Value)
	div := 1.0
	if strings.HasSuffix(s, "%") {
		s, div = strings.TrimSuffix(s, "%"), 100
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("line %d: %q is not a percentage", n.Line, n.Value)
	}
	*p = Percent(f / div)
	return nil
}

// StringList is a list that may be written as a single scalar.
type StringList []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (l *StringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = StringList{n.Value}
		return nil
	}
	var s []string
	if err := n.Decode(&s); err != nil {
		return err
	}
	*l = s
	return nil
}

// Algorithm names a rate-limiting algorithm.
type Algorithm string

// The algorithms (docs/contract.md §5).
const (
	FixedWindow   Algorithm = "fixed_window"
	SlidingWindow Algorithm = "sliding_window"
	TokenBucket   Algorithm = "token_bucket"
	SlidingLog    Algorithm = "sliding_log"
	Concurrency   Algorithm = "concurrency"
	Distinct      Algorithm = "distinct"
	Ratio         Algorithm = "ratio"
	// Devices is not a rule's: the state of an account's device tokens
	// (the DeviceCheck and Revoke ops).
	Devices Algorithm = "devices"
)

// Algorithms lists every algorithm a rule may name.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog, Concurrency, Distinct, Ratio}

// packable reports whether a's state fits a field of the packed hash.
func (a Algorithm) packable() bool {
	return a == FixedWindow || a == TokenBucket || a == SlidingWindow || a == Ratio
}

// Dimensions lists every dimension a rule may key on.
var Dimensions = []string{"destination", "ip", "ip/56", "ip/48", "ip/24", "ip/16", "asn", "account", "device", "country", "prefix", "global"}

// Filters lists the request attributes a rule's `when` may match.
var Filters = []string{"channel", "purpose", "device"}

// The values of the device attribute (see [Request.Device]).
const (
	DeviceTrusted   = "trusted"
	DeviceUntrusted = "untrusted"
)

// Rule modes and counts.
const (
	ModeEnforce = "enforce"
	ModeShadow  = "shadow"
	ModeSoft    = "soft"
	// ModeChallenge: where the rule would deny, the request is asked for
	// a proof instead (docs/contract.md §6) and counts as admitted.
	ModeChallenge  = "challenge"
	CountRequests  = "requests"
	CountFailures  = "failures"
	CountSuccesses = "successes"
	CountHeld      = "held"
)

// Bounds on rules, checked by [Config.Validate].
const (
	MinWindow = 100 * time.Millisecond
	MaxWindow = 30 * 24 * time.Hour
	MaxLimit  = 1 << 40
	// MaxRemember bounds the values a distinct set keeps (Rule.Remember).
	MaxRemember = 10000
)
