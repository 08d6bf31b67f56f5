// Package config owns otpguard's configuration document
// (docs/contract.md §5, docs/config.md): its sections (otp, token,
// network, store, signup, devices, challenge, rules), the embedded
// default (default.yaml) every document is laid over, strict YAML parsing
// within bounds (MaxConfigBytes, MaxRules, MaxConfigDepth), the defaults
// that depend on other fields, and validation, which names each bad
// field by its path ([FieldError]).
//
// The rate-limiting engine, package guard, never reads the document:
// [Config.Engine] gives it the rules and the settings it runs by, and
// the product's other parts (the API, the OTP codes, the CAPTCHA) read
// their sections from a [Config].
package config

import (
	"bytes"
	_ "embed"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/store"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the embedded default configuration document.
func DefaultYAML() []byte { return bytes.Clone(defaultYAML) }

// Config is the whole otpguard configuration document (docs/contract.md §5).
// Its zero value is not usable; start from [Default] or [Parse].
type Config struct {
	// OTP configures verification codes and where SMS may go.
	OTP OTPConfig `yaml:"otp"`
	// Token configures the verification token.
	Token TokenConfig `yaml:"token"`
	// Network says how the client IP is found and grouped.
	Network NetworkConfig `yaml:"network"`
	// Store bounds calls to the store and sizes the deny cache.
	Store StoreConfig `yaml:"store"`
	// Signup says what a signup may carry.
	Signup SignupConfig `yaml:"signup"`
	// Devices configures trusted-device tokens.
	Devices DevicesConfig `yaml:"devices"`
	// Challenge configures the proofs a rule in mode challenge asks for.
	Challenge ChallengeConfig `yaml:"challenge"`
	// Rules replaces the default rules as a whole when given. The
	// document's rules are read through their own form (a percentage
	// and a single value are written as such), hence no tag here.
	Rules []guard.Rule `yaml:"-"`
}

// OTPConfig configures verification codes.
type OTPConfig struct {
	// Length is the number of digits of a code, 6 to 10. Default 6.
	Length int `yaml:"length"`
	// TTL is how long a code stays valid, at most 10m. Default 10m.
	TTL time.Duration `yaml:"ttl"`
	// MaxAttempts is how many wrong guesses burn a code. Default 5.
	MaxAttempts int `yaml:"maxAttempts"`
	// Purposes lists the accepted `purpose` values.
	Purposes []string  `yaml:"purposes"`
	SMS      SMSConfig `yaml:"sms"`
}

// SMSConfig restricts where SMS codes may go.
type SMSConfig struct {
	// DefaultRegion is the ISO 3166 region used to read national-format
	// numbers. Default US.
	DefaultRegion string `yaml:"defaultRegion"`
	// AllowedCountries lists the regions SMS may be sent to; empty means all.
	AllowedCountries []string `yaml:"allowedCountries"`
	// AllowedTypes lists the accepted number types (see identity.PhoneTypes).
	// Default mobile and fixed_line_or_mobile.
	AllowedTypes []string `yaml:"allowedTypes"`
}

// TokenConfig configures the verification token (JWT).
type TokenConfig struct {
	// TTL is the token lifetime. Default 5m.
	TTL time.Duration `yaml:"ttl"`
	// Issuer is the `iss` claim. Default otpguard.
	Issuer string `yaml:"issuer"`
}

// NetworkConfig says how the client IP is found and grouped.
type NetworkConfig struct {
	// TrustedProxies lists the CIDRs whose forwarding headers are believed.
	// Default none: only the connection's peer counts.
	TrustedProxies []string `yaml:"trustedProxies"`
	// IPv6Prefix is the prefix length an IPv6 client is counted by for the
	// `ip` dimension, 32 to 128. Default 64.
	IPv6Prefix int `yaml:"ipv6Prefix"`
	// AllowedOrigins lists the web origins (scheme://host[:port]) whose
	// browsers may call the public routes (CORS). Default none: browsers
	// on other origins cannot post JSON to the API.
	AllowedOrigins []string `yaml:"allowedOrigins"`
	// ASNDatabase is the path of a MaxMind-format ASN database
	// (GeoLite2-ASN, DB-IP ASN Lite) for the `asn` dimension. Default
	// none: a rule keyed on asn is then a config error. It is read once
	// at start-up and at each config refresh; nothing is downloaded.
	ASNDatabase string `yaml:"asnDatabase"`
}

// ChallengeConfig configures the proofs of docs/contract.md §6.
type ChallengeConfig struct {
	// Captcha is the CAPTCHA provider that challenged sends, signups and
	// custom actions are asked to solve. Required when such a rule is in
	// mode challenge; logins are challenged with a step-up code instead.
	Captcha *CaptchaConfig `yaml:"captcha"`
}

// CaptchaConfig is a CAPTCHA provider with a siteverify API (Cloudflare
// Turnstile, hCaptcha and reCAPTCHA share its form). Its secret is not
// here: CAPTCHA_SECRET locally, Secrets Manager on AWS.
type CaptchaConfig struct {
	// Provider is turnstile, hcaptcha or recaptcha.
	Provider string `yaml:"provider"`
	// VerifyURL is the siteverify endpoint. Default: the provider's.
	VerifyURL string `yaml:"verifyUrl"`
	// SiteKey is the public key the client's widget needs (it is in the
	// 403 challenge_required answer).
	SiteKey string `yaml:"siteKey"`
	// Hostnames, when set, are the only hostnames a solved token may name.
	Hostnames []string `yaml:"hostnames"`
	// Timeout bounds a siteverify call. Default 3s.
	Timeout time.Duration `yaml:"timeout"`
}

// CaptchaProviders are the providers and their siteverify endpoints.
var CaptchaProviders = map[string]string{
	"turnstile": "https://challenges.cloudflare.com/turnstile/v0/siteverify",
	"hcaptcha":  "https://api.hcaptcha.com/siteverify",
	"recaptcha": "https://www.google.com/recaptcha/api/siteverify",
}

// DevicesConfig configures trusted-device tokens (docs/contract.md §7).
type DevicesConfig struct {
	// TTL is how long a device token stays valid after it is issued (each
	// successful login issues a fresh one). Default 180 days (4320h), 1h
	// to 400 days.
	TTL time.Duration `yaml:"ttl"`
}

// SignupConfig says what a signup may carry besides the email and the
// password.
type SignupConfig struct {
	// Attributes lists the user attributes /v1/signup passes to the
	// authenticator (Cognito's SignUp, the app's own endpoint); any other
	// is refused (400), so a client cannot set email_verified or a
	// custom: attribute your app trusts. Default name, given_name,
	// family_name, locale, zoneinfo.
	Attributes []string `yaml:"attributes"`
}

// StoreConfig bounds calls to the store.
type StoreConfig struct {
	// Timeout bounds one decision's work in Redis. Default 50ms.
	Timeout time.Duration `yaml:"timeout"`
	// DenyCache remembers denials in process (see guard.Guard).
	DenyCache DenyCacheConfig `yaml:"denyCache"`
}

// DenyCacheConfig sizes the in-process cache of denials.
type DenyCacheConfig struct {
	// TTL caps how long a denial is answered from the cache; 0 turns the
	// cache off. Default 2s, at most 1m.
	TTL time.Duration `yaml:"ttl"`
	// Size bounds the number of cached denials. Default 10000.
	Size int `yaml:"size"`
}

// Default returns the embedded default configuration.
func Default() Config {
	c, err := Parse(nil)
	if err != nil {
		panic("config: embedded default config is invalid: " + err.Error())
	}
	return c
}

// Engine returns what guard.New runs by: the rules and the store,
// network and devices settings the engine reads.
func (c Config) Engine() guard.Config {
	return guard.Config{
		Rules:         c.Rules,
		StoreTimeout:  c.Store.Timeout,
		DenyCacheTTL:  c.Store.DenyCache.TTL,
		DenyCacheSize: c.Store.DenyCache.Size,
		IPv6Prefix:    c.Network.IPv6Prefix,
		DeviceTTL:     c.Devices.TTL,
	}
}

// Policy returns the otp.sms settings as the phone policy
// identity.ParsePhone checks numbers against.
func (s SMSConfig) Policy() identity.PhonePolicy {
	return identity.PhonePolicy{
		DefaultRegion:    s.DefaultRegion,
		AllowedCountries: s.AllowedCountries,
		AllowedTypes:     s.AllowedTypes,
	}
}

// fill sets the defaults that depend on other fields.
func (c *Config) fill() {
	if cp := c.Challenge.Captcha; cp != nil {
		if cp.VerifyURL == "" {
			cp.VerifyURL = CaptchaProviders[cp.Provider]
		}
		if cp.Timeout == 0 {
			cp.Timeout = 3 * time.Second
		}
	}
	for i := range c.Rules {
		fillRule(&c.Rules[i])
	}
}

// fillRule sets a rule's defaults, which depend on its other fields.
func fillRule(r *guard.Rule) {
	if r.Algorithm == "" {
		r.Algorithm = store.FixedWindow
	}
	if r.Count == "" {
		r.Count = guard.CountRequests
		if r.Algorithm == store.Ratio {
			r.Count = guard.CountFailures // a ratio of failures
		}
	}
	if r.Algorithm == store.Ratio && r.Min == 0 {
		r.Min = 20
	}
	if r.Mode == "" {
		r.Mode = guard.ModeEnforce
	}
	if r.Mode == guard.ModeChallenge && r.Fallback == "" {
		r.Fallback = "deny"
	}
	if r.Mode == guard.ModeSoft && r.Overage == 0 {
		r.Overage = 0.10
	}
	if r.OnStoreError == "" {
		r.OnStoreError = "deny"
		if r.Action == "login" || r.Action == "signup" {
			r.OnStoreError = "allow"
		}
	}
	if r.Lockout != nil && r.Lockout.Reset == 0 {
		r.Lockout.Reset = 24 * time.Hour
	}
}
