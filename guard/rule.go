package guard

import (
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// Rule is one rate limit. See docs/contract.md §5 for the meaning of each
// field; the tags name them as the configuration document writes them
// (package config reads it, and Overage, When and Elastic from their
// written forms). The defaults named below are the document's: package
// config fills them in; New takes a rule as it is.
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
	// the ratio algorithm, the failure ratio that denies, in percent
	// (80 for 80%, written "80%" in the document).
	Limit int64 `yaml:"limit"`
	// Min is, for the ratio algorithm, how many attempts the window must
	// have seen before the ratio may deny. Default 20.
	Min int64 `yaml:"min"`
	// Window is the period the limit applies to; for concurrency, how long
	// a lease lives before it expires on its own.
	Window time.Duration `yaml:"window"`
	// Algorithm is one of [store.Algorithms]. Default fixed_window.
	Algorithm store.Algorithm `yaml:"algorithm"`
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
	// fraction (0.1 for 10%). Only with mode soft; default 10%.
	Overage float64 `yaml:"-"`
	// When restricts the rule to requests whose attributes match: each
	// attribute must equal one of the listed values.
	When map[string][]string `yaml:"-"`
	// Lockout, with count failures, locks the subject out when failures
	// reach Limit, for progressively longer periods.
	Lockout *store.Lockout `yaml:"lockout"`
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
	Elastic *Elastic `yaml:"-"`
	// Fallback is, for a login rule in mode challenge, what happens to
	// an account that has no verified address to send a step-up code to:
	// deny (the default) or allow.
	Fallback string `yaml:"fallback"`
}

// Elastic is a limit that follows verified traffic (see [Rule.Elastic]).
type Elastic struct {
	// Ratio is the share of the window's successes that becomes the
	// limit, when that is more than the rule's own (0.2 for 20%).
	Ratio float64
}

// Lease sizes a rule's quota leases: a process takes up to Units at once
// (never more than a quarter of what the limit leaves) and spends them
// without asking Redis until they run out or the window ends.
type Lease struct {
	Units int64 `yaml:"units"`
}

// packable reports whether a's state fits a field of the packed hash.
func packable(a store.Algorithm) bool {
	return a == store.FixedWindow || a == store.TokenBucket || a == store.SlidingWindow || a == store.Ratio
}

// Dimensions lists every dimension a rule may key on.
var Dimensions = []string{"destination", "ip", "ip/56", "ip/48", "ip/24", "ip/16", "asn", "account", "device", "country", "prefix", "global"}

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

// MaxLimit bounds a rule's limit, and any number of units the engine
// takes or gives back at once.
const MaxLimit = 1 << 40

// StateID is the short name of the rule's state among the rules keyed
// on the same dimensions (12 bits of a hash of its name and algorithm: a
// new algorithm never reads an old one's state). Two rules keyed alike
// must not share one.
func (r Rule) StateID() string { return ruleID(r.Name, r.Algorithm) }

// dimsKey names a set of dimensions whatever their order.
func dimsKey(dims []string) string {
	s := slices.Clone(dims)
	slices.Sort(s)
	return strings.Join(s, "\x00")
}

// ruleID is the short name of a rule's state among the rules keyed on the
// same dimensions (see [Rule.StateID]).
func ruleID(name string, alg store.Algorithm) string {
	sum := sha256.Sum256([]byte(name + "\x00" + string(alg)))
	return base64.RawURLEncoding.EncodeToString(sum[:2])[:2]
}
