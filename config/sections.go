package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/guard/identity"
)

// The validators of the document's sections, each naming its bad fields
// by their paths from the document's root.

// validate checks the otp section: codes, purposes, where SMS may go.
func (o *OTPConfig) validate(bad badFunc) {
	if o.Length < 6 || o.Length > 10 {
		bad("otp.length", "must be 6 to 10 digits, got %d", o.Length)
	}
	if o.TTL <= 0 || o.TTL > 10*time.Minute {
		bad("otp.ttl", "must be more than 0 and at most 10m, got %s", o.TTL)
	}
	if o.MaxAttempts < 1 || o.MaxAttempts > 100 {
		bad("otp.maxAttempts", "must be 1 to 100, got %d", o.MaxAttempts)
	}
	if len(o.Purposes) == 0 {
		bad("otp.purposes", "must list at least one purpose")
	}
	purposes := make(map[string]bool, len(o.Purposes))
	for i, p := range o.Purposes {
		if !actionPattern.MatchString(p) {
			bad(fmt.Sprintf("otp.purposes[%d]", i), "%q must be lower-case letters, digits, '.', '_' or '-'", p)
		} else if purposes[p] {
			bad(fmt.Sprintf("otp.purposes[%d]", i), "%q is listed twice", p)
		}
		purposes[p] = true
	}
	o.SMS.validate(bad)
}

// validate checks otp.sms: the regions and number types libphonenumber
// knows (the names guard/identity reads a number's type by).
func (s *SMSConfig) validate(bad badFunc) {
	regions := phonenumbers.GetSupportedRegions()
	if _, ok := regions[s.DefaultRegion]; !ok {
		bad("otp.sms.defaultRegion", "%q is not a supported ISO 3166 region code", s.DefaultRegion)
	}
	for i, r := range s.AllowedCountries {
		if _, ok := regions[r]; !ok {
			bad(fmt.Sprintf("otp.sms.allowedCountries[%d]", i), "%q is not a supported ISO 3166 region code", r)
		}
	}
	phoneTypes := identity.PhoneTypes()
	for i, t := range s.AllowedTypes {
		if !slices.Contains(phoneTypes, t) {
			bad(fmt.Sprintf("otp.sms.allowedTypes[%d]", i), "%q is not one of %s", t, strings.Join(phoneTypes, ", "))
		}
	}
	if len(s.AllowedTypes) == 0 {
		bad("otp.sms.allowedTypes", "must list at least one number type")
	}
}

// validate checks the token section.
func (t *TokenConfig) validate(bad badFunc) {
	if t.TTL <= 0 || t.TTL > 24*time.Hour {
		bad("token.ttl", "must be more than 0 and at most 24h, got %s", t.TTL)
	}
	if strings.TrimSpace(t.Issuer) == "" {
		bad("token.issuer", "must not be empty")
	}
}

// validate checks the network section's trusted proxies and IPv6 prefix
// (its origins: validateOrigins).
func (n *NetworkConfig) validate(bad badFunc) {
	for i, p := range n.TrustedProxies {
		if _, err := parsePrefix(p); err != nil {
			bad(fmt.Sprintf("network.trustedProxies[%d]", i), "%q is not an IP address or CIDR", p)
		}
	}
	if n.IPv6Prefix < 32 || n.IPv6Prefix > 128 {
		bad("network.ipv6Prefix", "must be 32 to 128, got %d", n.IPv6Prefix)
	}
}

// validateOrigins checks network.allowedOrigins.
func (n *NetworkConfig) validateOrigins(bad badFunc) {
	for i, o := range n.AllowedOrigins {
		if !validOrigin(o) {
			bad(fmt.Sprintf("network.allowedOrigins[%d]", i), "%q is not an origin such as https://app.example.com", o)
		}
	}
}

// validate checks the devices section.
func (d *DevicesConfig) validate(bad badFunc) {
	if d.TTL < time.Hour || d.TTL > 400*24*time.Hour {
		bad("devices.ttl", "must be 1h to 400 days (9600h), got %s", d.TTL)
	}
}

// validate checks the store section.
func (s *StoreConfig) validate(bad badFunc) {
	if s.Timeout <= 0 || s.Timeout > 10*time.Second {
		bad("store.timeout", "must be more than 0 and at most 10s, got %s", s.Timeout)
	}
	if s.DenyCache.TTL < 0 || s.DenyCache.TTL > time.Minute {
		bad("store.denyCache.ttl", "must be 0 (off) to 1m, got %s", s.DenyCache.TTL)
	}
	if s.DenyCache.Size < 1 || s.DenyCache.Size > 10_000_000 {
		bad("store.denyCache.size", "must be 1 to 10000000, got %d", s.DenyCache.Size)
	}
}

// validate checks the signup section.
func (s *SignupConfig) validate(bad badFunc) {
	for i, a := range s.Attributes {
		if !attributePattern.MatchString(a) {
			bad(fmt.Sprintf("signup.attributes[%d]", i), "%q is not an attribute name (letters, digits, '_', '-', ':', at most 64)", a)
		}
	}
}

// validate checks challenge.captcha.
func (cp *CaptchaConfig) validate(bad badFunc) {
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
