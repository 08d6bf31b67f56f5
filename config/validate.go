package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
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
	c.validateOTP(bad)
	c.validateSections(bad)
	c.validateCaptcha(bad)
	c.validateRules(percent, bad)
	if problems > maxProblems {
		errs = append(errs, fmt.Errorf("config: and %d more problems", problems-maxProblems))
	}
	return errors.Join(errs...)
}

// validateOTP checks the otp section: codes, purposes, where SMS may go.
func (c *Config) validateOTP(bad badFunc) {
	if c.OTP.Length < 6 || c.OTP.Length > 10 {
		bad("otp.length", "must be 6 to 10 digits, got %d", c.OTP.Length)
	}
	if c.OTP.TTL <= 0 || c.OTP.TTL > 10*time.Minute {
		bad("otp.ttl", "must be more than 0 and at most 10m, got %s", c.OTP.TTL)
	}
	if c.OTP.MaxAttempts < 1 || c.OTP.MaxAttempts > 100 {
		bad("otp.maxAttempts", "must be 1 to 100, got %d", c.OTP.MaxAttempts)
	}
	if len(c.OTP.Purposes) == 0 {
		bad("otp.purposes", "must list at least one purpose")
	}
	purposes := make(map[string]bool, len(c.OTP.Purposes))
	for i, p := range c.OTP.Purposes {
		if !actionPattern.MatchString(p) {
			bad(fmt.Sprintf("otp.purposes[%d]", i), "%q must be lower-case letters, digits, '.', '_' or '-'", p)
		} else if purposes[p] {
			bad(fmt.Sprintf("otp.purposes[%d]", i), "%q is listed twice", p)
		}
		purposes[p] = true
	}
	regions := phonenumbers.GetSupportedRegions()
	if _, ok := regions[c.OTP.SMS.DefaultRegion]; !ok {
		bad("otp.sms.defaultRegion", "%q is not a supported ISO 3166 region code", c.OTP.SMS.DefaultRegion)
	}
	for i, r := range c.OTP.SMS.AllowedCountries {
		if _, ok := regions[r]; !ok {
			bad(fmt.Sprintf("otp.sms.allowedCountries[%d]", i), "%q is not a supported ISO 3166 region code", r)
		}
	}
	phoneTypes := identity.PhoneTypes()
	for i, t := range c.OTP.SMS.AllowedTypes {
		if !slices.Contains(phoneTypes, t) {
			bad(fmt.Sprintf("otp.sms.allowedTypes[%d]", i), "%q is not one of %s", t, strings.Join(phoneTypes, ", "))
		}
	}
	if len(c.OTP.SMS.AllowedTypes) == 0 {
		bad("otp.sms.allowedTypes", "must list at least one number type")
	}
}

// validateSections checks token, network, devices, store and signup.
func (c *Config) validateSections(bad badFunc) {
	if c.Token.TTL <= 0 || c.Token.TTL > 24*time.Hour {
		bad("token.ttl", "must be more than 0 and at most 24h, got %s", c.Token.TTL)
	}
	if strings.TrimSpace(c.Token.Issuer) == "" {
		bad("token.issuer", "must not be empty")
	}
	for i, p := range c.Network.TrustedProxies {
		if _, err := parsePrefix(p); err != nil {
			bad(fmt.Sprintf("network.trustedProxies[%d]", i), "%q is not an IP address or CIDR", p)
		}
	}
	if c.Network.IPv6Prefix < 32 || c.Network.IPv6Prefix > 128 {
		bad("network.ipv6Prefix", "must be 32 to 128, got %d", c.Network.IPv6Prefix)
	}
	if c.Devices.TTL < time.Hour || c.Devices.TTL > 400*24*time.Hour {
		bad("devices.ttl", "must be 1h to 400 days (9600h), got %s", c.Devices.TTL)
	}
	if c.Store.Timeout <= 0 || c.Store.Timeout > 10*time.Second {
		bad("store.timeout", "must be more than 0 and at most 10s, got %s", c.Store.Timeout)
	}
	if c.Store.DenyCache.TTL < 0 || c.Store.DenyCache.TTL > time.Minute {
		bad("store.denyCache.ttl", "must be 0 (off) to 1m, got %s", c.Store.DenyCache.TTL)
	}
	if c.Store.DenyCache.Size < 1 || c.Store.DenyCache.Size > 10_000_000 {
		bad("store.denyCache.size", "must be 1 to 10000000, got %d", c.Store.DenyCache.Size)
	}
	for i, a := range c.Signup.Attributes {
		if !attributePattern.MatchString(a) {
			bad(fmt.Sprintf("signup.attributes[%d]", i), "%q is not an attribute name (letters, digits, '_', '-', ':', at most 64)", a)
		}
	}
	for i, o := range c.Network.AllowedOrigins {
		if !validOrigin(o) {
			bad(fmt.Sprintf("network.allowedOrigins[%d]", i), "%q is not an origin such as https://app.example.com", o)
		}
	}
}

// validateCaptcha checks challenge.captcha, when there is one.
func (c *Config) validateCaptcha(bad badFunc) {
	if cp := c.Challenge.Captcha; cp != nil {
		if _, ok := CaptchaProviders[cp.Provider]; !ok {
			bad("challenge.captcha.provider", "must be turnstile, hcaptcha or recaptcha, got %q", cp.Provider)
		}
		if u, err := url.Parse(cp.VerifyURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("challenge.captcha.verifyUrl", "%q is not an http(s) URL", cp.VerifyURL)
		}
		if strings.TrimSpace(cp.SiteKey) == "" {
			bad("challenge.captcha.siteKey", "must not be empty: the client's widget needs it")
		}
		if cp.Timeout <= 0 || cp.Timeout > 10*time.Second {
			bad("challenge.captcha.timeout", "must be more than 0 and at most 10s, got %s", cp.Timeout)
		}
	}
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
