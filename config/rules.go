package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/store"
)

// Bounds on rules, checked by [Parse] (a rule's limit is at most
// guard.MaxLimit).
const (
	// MinWindow and MaxWindow bound a rule's window, and a lockout's
	// durations.
	MinWindow = 100 * time.Millisecond
	MaxWindow = 30 * 24 * time.Hour
	// MaxRemember bounds the values a distinct set keeps (remember).
	MaxRemember = 10000
)

// Filters lists the request attributes a rule's `when` may match.
var Filters = []string{"channel", "purpose", "device"}

// validateRule checks one rule, named at (for example `rules[2]`);
// percent tells whether its limit was written as a percentage.
func validateRule(r *guard.Rule, percent bool, at string, bad badFunc) {
	if !namePattern.MatchString(r.Name) {
		bad(at+".name", "%q must be 1 to 64 letters, digits, '.', '_' or '-'", r.Name)
	}
	if r.Name != "" {
		at = fmt.Sprintf("%s (%s)", at, r.Name)
	}
	if !actionPattern.MatchString(r.Action) {
		bad(at+".action", "%q must be 1 to 64 lower-case letters, digits, '.', '_' or '-'", r.Action)
	}
	if len(r.Key) == 0 {
		bad(at+".key", "must list at least one dimension (%s)", strings.Join(guard.Dimensions, ", "))
	}
	for i, d := range r.Key {
		if !slices.Contains(guard.Dimensions, d) {
			bad(fmt.Sprintf("%s.key[%d]", at, i), "unknown dimension %q; one of %s", d, strings.Join(guard.Dimensions, ", "))
		} else if slices.Index(r.Key, d) != i {
			bad(fmt.Sprintf("%s.key[%d]", at, i), "dimension %q is listed twice", d)
		}
	}
	validateLimit(r, percent, at, bad)
	validateElastic(r, at, bad)
	if r.Window < MinWindow || r.Window > MaxWindow {
		bad(at+".window", "must be %s to %s, got %s", MinWindow, MaxWindow, r.Window)
	} else if r.Window%time.Millisecond != 0 {
		bad(at+".window", "must be a whole number of milliseconds, got %s", r.Window)
	}
	if !slices.Contains(store.Algorithms, r.Algorithm) {
		bad(at+".algorithm", "unknown algorithm %q; one of %s", r.Algorithm, joinAlgorithms())
	}
	validateCounting(r, at, bad)
	validateMode(r, at, bad)
	validateLockout(r, at, bad)
	if r.ResetOnSuccess && r.Count != guard.CountFailures {
		bad(at+".resetOnSuccess", "needs count: failures")
	}
	if r.OnStoreError != "deny" && r.OnStoreError != "allow" {
		bad(at+".onStoreError", "must be deny or allow, got %q", r.OnStoreError)
	}
}

// validateLimit checks limit and min (a percentage for a ratio, units
// otherwise) and what a ratio allows.
func validateLimit(r *guard.Rule, percent bool, at string, bad badFunc) {
	switch {
	case r.Algorithm == store.Ratio && !percent:
		bad(at+".limit", "the ratio algorithm's limit is the failure ratio that denies, a percentage such as 80%%")
	case r.Algorithm == store.Ratio && (r.Limit < 1 || r.Limit > 99):
		bad(at+".limit", "must be 1%% to 99%%, got %d%%", r.Limit)
	case r.Algorithm != store.Ratio && percent:
		bad(at+".limit", "a percentage is only the ratio algorithm's limit; this rule counts units: a whole number")
	case r.Algorithm != store.Ratio && (r.Limit < 1 || r.Limit > guard.MaxLimit):
		bad(at+".limit", "must be 1 to %d, got %d", int64(guard.MaxLimit), r.Limit)
	}
	switch {
	case r.Algorithm == store.Ratio && (r.Min < 1 || r.Min > guard.MaxLimit):
		bad(at+".min", "must be 1 to %d attempts, got %d", int64(guard.MaxLimit), r.Min)
	case r.Algorithm != store.Ratio && r.Min != 0:
		bad(at+".min", "only applies to the ratio algorithm")
	}
	if r.Algorithm == store.Ratio {
		switch {
		case r.Count != guard.CountFailures:
			bad(at+".count", "the ratio algorithm counts failures (leave count out)")
		case r.Mode == guard.ModeSoft:
			bad(at+".mode", "a ratio has no overage: enforce or shadow")
		case r.ResetOnSuccess:
			bad(at+".resetOnSuccess", "does not apply to the ratio algorithm (a success counts in its ratio)")
		case r.Lockout != nil:
			bad(at+".lockout", "does not apply to the ratio algorithm (it denies while the ratio holds)")
		}
	}
}

// validateElastic checks an elastic limit.
func validateElastic(r *guard.Rule, at string, bad badFunc) {
	if e := r.Elastic; e != nil {
		switch {
		case r.Algorithm != store.SlidingWindow || r.Count != guard.CountFailures:
			bad(at+".elastic", "needs algorithm sliding_window and count failures (the successes are what it follows)")
		case e.Ratio <= 0 || e.Ratio > 10:
			bad(at+".elastic.ratio", "must be more than 0%% and at most 1000%%, got %g%%", float64(e.Ratio)*100)
		}
	}
}

// validateCounting checks what a rule counts: distinct's of, a lease,
// count, remember.
func validateCounting(r *guard.Rule, at string, bad badFunc) {
	switch {
	case r.Algorithm == store.Distinct && (r.Of == "" || r.Of == "global" || !slices.Contains(guard.Dimensions, r.Of)):
		bad(at+".of", "the distinct algorithm counts the distinct values of one dimension: one of %s except global", strings.Join(guard.Dimensions, ", "))
	case r.Algorithm == store.Distinct && slices.Contains(r.Key, r.Of):
		bad(at+".of", "%q is also in key: one value per key cannot be counted", r.Of)
	case r.Algorithm == store.Distinct && r.Of == "device":
		bad(at+".of", "devices cannot be counted (untrusted clients share one value); count account or ip")
	case r.Algorithm != store.Distinct && r.Of != "":
		bad(at+".of", "only applies to the distinct algorithm")
	}
	if l := r.Lease; l != nil {
		switch {
		case r.Algorithm != store.FixedWindow || r.Count != guard.CountRequests || r.Mode != guard.ModeEnforce:
			bad(at+".lease", "needs algorithm fixed_window, count requests and mode enforce")
		case l.Units < 2 || l.Units > r.Limit:
			bad(at+".lease.units", "must be 2 to the rule's limit (%d), got %d", r.Limit, l.Units)
		}
	}
	switch r.Count {
	case guard.CountRequests:
	case guard.CountFailures:
		if r.Algorithm == store.Concurrency {
			bad(at+".count", "failures cannot be counted with the concurrency algorithm")
		}
	case guard.CountSuccesses:
		if r.Algorithm != store.Distinct {
			bad(at+".count", "successes are counted by the distinct algorithm only (the values of attempts that succeeded)")
		}
	case guard.CountHeld:
		if r.Algorithm == store.Distinct || r.Algorithm == store.Concurrency || r.Algorithm == store.Ratio {
			bad(at+".count", "held attempts are counted by fixed_window, sliding_window, token_bucket or sliding_log")
		}
	default:
		bad(at+".count", "must be %q, %q, %q or %q, got %q", guard.CountRequests, guard.CountFailures, guard.CountHeld, guard.CountSuccesses, r.Count)
	}
	switch {
	case r.Remember != 0 && r.Algorithm != store.Distinct:
		bad(at+".remember", "only applies to the distinct algorithm")
	case r.Remember != 0 && (r.Remember < r.Limit || r.Remember > MaxRemember):
		bad(at+".remember", "must be the limit (%d) to %d values, got %d", r.Limit, MaxRemember, r.Remember)
	}
}

// validateMode checks mode, fallback, overage and the when filters.
func validateMode(r *guard.Rule, at string, bad badFunc) {
	switch {
	case r.Mode == guard.ModeChallenge && r.Fallback != "deny" && r.Fallback != "allow":
		bad(at+".fallback", "must be deny or allow, got %q", r.Fallback)
	case r.Mode != guard.ModeChallenge && r.Fallback != "":
		bad(at+".fallback", "only applies to mode challenge")
	case r.Mode == guard.ModeChallenge && r.Lease != nil:
		bad(at+".lease", "does not apply to mode challenge")
	}
	switch r.Mode {
	case guard.ModeEnforce, guard.ModeShadow, guard.ModeChallenge:
		if r.Overage != 0 {
			bad(at+".overage", "only applies to mode soft")
		}
	case guard.ModeSoft:
		if r.Overage <= 0 || r.Overage > 10 {
			bad(at+".overage", "must be more than 0%% and at most 1000%%, got %g%%", float64(r.Overage)*100)
		}
	default:
		bad(at+".mode", "must be enforce, shadow, soft or challenge, got %q", r.Mode)
	}
	for k, vs := range r.When {
		if !slices.Contains(Filters, k) {
			bad(at+".when."+k, "unknown filter; one of %s", strings.Join(Filters, ", "))
		}
		if len(vs) == 0 {
			bad(at+".when."+k, "must list at least one value")
		}
		if k == "device" {
			for _, v := range vs {
				if v != guard.DeviceTrusted && v != guard.DeviceUntrusted {
					bad(at+".when.device", "%q is not %s or %s", v, guard.DeviceTrusted, guard.DeviceUntrusted)
				}
			}
		}
	}
}

// validateLockout checks a lockout's durations and what it needs.
func validateLockout(r *guard.Rule, at string, bad badFunc) {
	if l := r.Lockout; l != nil {
		if r.Count != guard.CountFailures {
			bad(at+".lockout", "needs count: failures (a lockout follows failed attempts)")
		}
		if r.Algorithm == store.Distinct {
			bad(at+".lockout", "does not apply to the distinct algorithm (it denies new values for its window already)")
		}
		if l.Initial < time.Second {
			bad(at+".lockout.initial", "must be at least 1s, got %s", l.Initial)
		}
		if l.Factor < 1 || l.Factor > 100 {
			bad(at+".lockout.factor", "must be 1 to 100, got %g", l.Factor)
		}
		if l.Max < l.Initial || l.Max > MaxWindow {
			bad(at+".lockout.max", "must be at least lockout.initial (%s) and at most %s, got %s", l.Initial, MaxWindow, l.Max)
		}
		if l.Reset < l.Max || l.Reset > MaxWindow {
			bad(at+".lockout.reset", "must be at least lockout.max (%s) and at most %s, got %s", l.Max, MaxWindow, l.Reset)
		}
	}
}

// dimsKey names a set of dimensions whatever their order.
func dimsKey(dims []string) string {
	s := slices.Clone(dims)
	slices.Sort(s)
	return strings.Join(s, "\x00")
}

func joinAlgorithms() string {
	s := make([]string, len(store.Algorithms))
	for i, a := range store.Algorithms {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}
