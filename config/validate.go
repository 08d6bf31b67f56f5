package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/otpguard/otpguard/guard"
)

// FieldError names the configuration field that is wrong.
type FieldError struct {
	// Field is the field's path, for example `rules[2] (name).limit`.
	Field string
	// Msg says what is wrong with it.
	Msg string
}

// Error is "config: ", the field's path and what is wrong with it.
func (e *FieldError) Error() string { return "config: " + e.Field + ": " + e.Msg }

var (
	attributePattern = regexp.MustCompile(`^[A-Za-z0-9_:-]{1,64}$`)
	namePattern      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	actionPattern    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
)

// badFunc reports a bad field: its path and what is wrong with it.
type badFunc = func(field, format string, args ...any)

// validate checks the whole document and reports every bad field, each
// named by its path (for example `rules[2].limit`); percent tells which
// rules' limits were written as percentages.
func (c *Config) validate(percent []bool) error {
	var errs []error
	problems := 0
	bad := func(field, format string, args ...any) {
		if problems++; problems <= maxProblems {
			errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
		}
	}
	c.OTP.validate(bad)
	c.Token.validate(bad)
	c.Network.validate(bad)
	c.Devices.validate(bad)
	c.Store.validate(bad)
	c.Signup.validate(bad)
	c.Network.validateOrigins(bad)
	if c.Challenge.Captcha != nil {
		c.Challenge.Captcha.validate(bad)
	}
	c.validateRules(percent, bad)
	if problems > maxProblems {
		errs = append(errs, fmt.Errorf("config: and %d more problems", problems-maxProblems))
	}
	return errors.Join(errs...)
}

// validateRules checks each rule, and that their names and state ids are unique.
func (c *Config) validateRules(percent []bool, bad badFunc) {
	// Names and state ids are indexed, not compared pairwise, so that
	// validation stays linear in the rules.
	byName := make(map[string]int, len(c.Rules))
	byState := make(map[string]int, len(c.Rules))
	for i := range c.Rules {
		if r := &c.Rules[i]; r.Mode == guard.ModeChallenge && r.Action != "login" && c.Challenge.Captcha == nil {
			bad(fmt.Sprintf("rules[%d] (%s).mode", i, r.Name), "a %s rule in mode challenge asks for a CAPTCHA: configure challenge.captcha (logins are challenged with a step-up code)", r.Action)
		}
		validateRule(&c.Rules[i], i < len(percent) && percent[i], fmt.Sprintf("rules[%d]", i), bad)
		if r := &c.Rules[i]; c.Network.ASNDatabase == "" && (slices.Contains(r.Key, "asn") || r.Of == "asn") {
			bad(fmt.Sprintf("rules[%d] (%s).key", i, r.Name), "the asn dimension needs an ASN database: set network.asnDatabase to the path of a MaxMind-format file (GeoLite2-ASN or DB-IP ASN Lite)")
		}
		b := &c.Rules[i]
		if j, ok := byName[b.Name]; ok {
			bad(fmt.Sprintf("rules[%d].name", i), "%q is already the name of rules[%d]", b.Name, j)
			continue
		}
		byName[b.Name] = i
		state := dimsKey(b.Key) + "\x01" + b.StateID()
		if j, ok := byState[state]; ok {
			bad(fmt.Sprintf("rules[%d].name", i), "%q and rules[%d] (%s) are keyed alike and their names hash to one state id; rename one of them", b.Name, j, c.Rules[j].Name)
		} else {
			byState[state] = i
		}
	}
}

// validOrigin reports whether o is a serialized web origin.
func validOrigin(o string) bool {
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && o == u.Scheme+"://"+u.Host && strings.ToLower(o) == o
}

// parsePrefix reads a CIDR or a bare address (as its full-length prefix).
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// TrustedProxyPrefixes returns network.trustedProxies parsed; call it on a
// validated Config.
func (c *Config) TrustedProxyPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(c.Network.TrustedProxies))
	for _, s := range c.Network.TrustedProxies {
		if p, err := parsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}
