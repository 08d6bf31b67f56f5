package guard

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"
	"go.yaml.in/yaml/v3"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the embedded default configuration document.
func DefaultYAML() []byte { return bytes.Clone(defaultYAML) }

// Config is the whole otpguard configuration document (docs/contract.md §5).
// Its zero value is not usable; start from [DefaultConfig] or [ParseConfig].
type Config struct {
	OTP     OTPConfig     `yaml:"otp"`
	Token   TokenConfig   `yaml:"token"`
	Network NetworkConfig `yaml:"network"`
	Store   StoreConfig   `yaml:"store"`
	Signup  SignupConfig  `yaml:"signup"`
	Devices DevicesConfig `yaml:"devices"`
	// Challenge configures the proofs a rule in mode challenge asks for.
	Challenge ChallengeConfig `yaml:"challenge"`
	// Rules replaces the default rules as a whole when given.
	Rules []Rule `yaml:"rules"`
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
	// AllowedTypes lists the accepted number types (see [PhoneTypes]).
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
	// DenyCache remembers denials in process (see [Guard]).
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

// Bounds on a configuration document, checked by [ParseConfig] before it
// decodes or validates anything, wherever the document comes from (the
// GUARD_CONFIG file, the SSM parameter, the console): a document over one
// is refused at once with a [LimitError] naming it.
const (
	// MaxConfigBytes is a document's size: 256 KiB, 45 times the
	// default document (2,000 rules written one a line take 160 KB).
	// What it bounds is the parser's work: the densest YAML of this size
	// (130,000 one-letter list items) is parsed and refused in about
	// half a second on a busy 2-core machine.
	MaxConfigBytes = 256 << 10
	// MaxRules is the length of the rules list (aliases count as the
	// rules they stand for): 80 times the default rules.
	MaxRules = 2000
	// MaxConfigDepth is how deep mappings and lists may nest; the
	// deepest field of the document is at 5.
	MaxConfigDepth = 20
	// maxProblems is how many problems an invalid document reports; the
	// rest are counted.
	maxProblems = 100
)

// LimitError is a document over one of the bounds [ParseConfig] checks
// before it decodes anything.
type LimitError struct {
	// Bound is the bound's name: MaxConfigBytes, MaxRules or
	// MaxConfigDepth.
	Bound string
	// Limit is the bound's value; Got is the document's (bytes, rules,
	// levels).
	Limit, Got int
}

func (e *LimitError) Error() string {
	switch e.Bound {
	case "MaxConfigBytes":
		return fmt.Sprintf("config: the document is %d bytes; at most %d (guard.%s)", e.Got, e.Limit, e.Bound)
	case "MaxRules":
		return fmt.Sprintf("config: rules: %d rules; at most %d (guard.%s)", e.Got, e.Limit, e.Bound)
	}
	return fmt.Sprintf("config: the document nests %d levels deep; at most %d (guard.%s)", e.Got, e.Limit, e.Bound)
}

// DefaultConfig returns the embedded default configuration.
func DefaultConfig() Config {
	c, err := ParseConfig(nil)
	if err != nil {
		panic("guard: embedded default config is invalid: " + err.Error())
	}
	return c
}

// ParseConfig reads a configuration document laid over the embedded
// default, fills defaults and validates it. An empty doc gives the default.
// A document over MaxConfigBytes, MaxRules or MaxConfigDepth is refused
// with a *LimitError before anything is decoded from it.
func ParseConfig(doc []byte) (Config, error) {
	if len(doc) > MaxConfigBytes {
		return Config{}, &LimitError{Bound: "MaxConfigBytes", Limit: MaxConfigBytes, Got: len(doc)}
	}
	var c Config
	if _, err := decodeRules(defaultYAML, &c); err != nil {
		return Config{}, fmt.Errorf("config: default: %w", err)
	}
	ownRules := false
	if len(bytes.TrimSpace(doc)) > 0 {
		var err error
		if ownRules, err = decodeRules(doc, &c); err != nil {
			if _, ok := err.(*LimitError); ok {
				return Config{}, err
			}
			return Config{}, fmt.Errorf("config: %w", err)
		}
	}
	if !ownRules && c.Network.ASNDatabase == "" {
		// The default rules on the asn dimension apply once an ASN
		// database is configured; a rule of yours on asn without one is
		// an error (Validate).
		c.Rules = slices.DeleteFunc(c.Rules, func(r Rule) bool { return slices.Contains(r.Key, "asn") || r.Of == "asn" })
	}
	c.fill()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// decodeRules decodes doc over c strictly; a rule's limit may be written
// as a percentage ("80%", the ratio algorithm's), which the document is
// rewritten for first (a custom unmarshaler would lose the strictness).
// It reports whether doc has a rules list (which replaces the rules
// before it as a whole).
func decodeRules(doc []byte, c *Config) (bool, error) {
	doc, marks, replaced, err := percents(doc)
	if err != nil {
		return false, err
	}
	if err := decodeStrict(doc, c); err != nil {
		return false, err
	}
	if replaced {
		for i := range c.Rules {
			c.Rules[i].percent = marks[i]
		}
	}
	return replaced, nil
}

// percents rewrites the rule limits of doc written as percentages to
// their numbers, and reports which rules had one and whether doc has a
// rules list at all. A document it cannot read is returned as it is (the
// strict decoding reports what is wrong with it); one over MaxConfigDepth
// or MaxRules is a LimitError.
func percents(doc []byte) (out []byte, marks map[int]bool, hasRules bool, err error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return doc, nil, false, nil
	}
	if d := nesting(&root, map[*yaml.Node]int{}); d > MaxConfigDepth {
		return doc, nil, false, &LimitError{Bound: "MaxConfigDepth", Limit: MaxConfigDepth, Got: d}
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return doc, nil, false, nil
	}
	top := root.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "rules" {
			continue
		}
		hasRules = true
		seq := top.Content[i+1]
		if seq.Kind == yaml.AliasNode && seq.Alias != nil {
			seq = seq.Alias
		}
		if seq.Kind != yaml.SequenceNode {
			return doc, nil, true, nil
		}
		if len(seq.Content) > MaxRules {
			return doc, nil, true, &LimitError{Bound: "MaxRules", Limit: MaxRules, Got: len(seq.Content)}
		}
		for k, item := range seq.Content {
			if item.Kind != yaml.MappingNode {
				continue
			}
			for j := 0; j+1 < len(item.Content); j += 2 {
				v := item.Content[j+1]
				if item.Content[j].Value == "limit" && v.Kind == yaml.ScalarNode && strings.HasSuffix(strings.TrimSpace(v.Value), "%") {
					v.Value = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v.Value), "%"))
					v.Tag, v.Style = "", 0
					if marks == nil {
						marks = map[int]bool{}
					}
					marks[k] = true
				}
			}
		}
	}
	if marks == nil {
		return doc, nil, hasRules, nil
	}
	b, merr := yaml.Marshal(&root)
	if merr != nil {
		return doc, nil, hasRules, nil
	}
	return b, marks, hasRules, nil
}

// nesting is how deep mappings and lists nest in n (an alias as deep as
// what it stands for); seen remembers each node's, so that aliases cost
// nothing more.
func nesting(n *yaml.Node, seen map[*yaml.Node]int) int {
	if d, ok := seen[n]; ok {
		return d
	}
	seen[n] = MaxConfigDepth + 1 // a node inside itself (the parser refuses those) is too deep
	d := 0
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias != nil {
			d = nesting(n.Alias, seen)
		}
	case yaml.DocumentNode, yaml.MappingNode, yaml.SequenceNode:
		for _, c := range n.Content {
			d = max(d, nesting(c, seen))
		}
		if n.Kind != yaml.DocumentNode {
			d++
		}
	}
	seen[n] = d
	return d
}

func decodeStrict(doc []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > maxProblems {
			te.Errors = append(te.Errors[:maxProblems], fmt.Sprintf("and %d more", len(te.Errors)-maxProblems))
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
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
		r := &c.Rules[i]
		if r.Algorithm == "" {
			r.Algorithm = FixedWindow
		}
		if r.Count == "" {
			r.Count = CountRequests
			if r.Algorithm == Ratio {
				r.Count = CountFailures // a ratio of failures
			}
		}
		if r.Algorithm == Ratio && r.Min == 0 {
			r.Min = 20
		}
		if r.Mode == "" {
			r.Mode = ModeEnforce
		}
		if r.Mode == ModeChallenge && r.Fallback == "" {
			r.Fallback = "deny"
		}
		if r.Mode == ModeSoft && r.Overage == 0 {
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
}

// FieldError names the configuration field that is wrong.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "config: " + e.Field + ": " + e.Msg }

var (
	attributePattern = regexp.MustCompile(`^[A-Za-z0-9_:-]{1,64}$`)
	namePattern      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	actionPattern    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
)

// Validate checks the whole document and reports every bad field, each
// named by its path (for example `rules[2].limit`).
func (c *Config) Validate() error {
	var errs []error
	problems := 0
	bad := func(field, format string, args ...any) {
		if problems++; problems <= maxProblems {
			errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
		}
	}
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
	for i, t := range c.OTP.SMS.AllowedTypes {
		if _, ok := phoneTypeByName[t]; !ok {
			bad(fmt.Sprintf("otp.sms.allowedTypes[%d]", i), "%q is not one of %s", t, strings.Join(PhoneTypes(), ", "))
		}
	}
	if len(c.OTP.SMS.AllowedTypes) == 0 {
		bad("otp.sms.allowedTypes", "must list at least one number type")
	}
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
	// Names and state ids are indexed, not compared pairwise, so that
	// validation stays linear in the rules.
	byName := make(map[string]int, len(c.Rules))
	byState := make(map[string]int, len(c.Rules))
	for i := range c.Rules {
		if r := &c.Rules[i]; r.Mode == ModeChallenge && r.Action != "login" && c.Challenge.Captcha == nil {
			bad(fmt.Sprintf("rules[%d] (%s).mode", i, r.Name), "a %s rule in mode challenge asks for a CAPTCHA: configure challenge.captcha (logins are challenged with a step-up code)", r.Action)
		}
		c.Rules[i].validate(fmt.Sprintf("rules[%d]", i), bad)
		if r := &c.Rules[i]; c.Network.ASNDatabase == "" && (slices.Contains(r.Key, "asn") || r.Of == "asn") {
			bad(fmt.Sprintf("rules[%d] (%s).key", i, r.Name), "the asn dimension needs an ASN database: set network.asnDatabase to the path of a MaxMind-format file (GeoLite2-ASN or DB-IP ASN Lite)")
		}
		b := &c.Rules[i]
		if j, ok := byName[b.Name]; ok {
			bad(fmt.Sprintf("rules[%d].name", i), "%q is already the name of rules[%d]", b.Name, j)
			continue
		}
		byName[b.Name] = i
		state := dimsKey(b.Key) + "\x01" + ruleID(b.Name, b.Algorithm)
		if j, ok := byState[state]; ok {
			bad(fmt.Sprintf("rules[%d].name", i), "%q and rules[%d] (%s) are keyed alike and their names hash to one state id; rename one of them", b.Name, j, c.Rules[j].Name)
		} else {
			byState[state] = i
		}
	}
	if problems > maxProblems {
		errs = append(errs, fmt.Errorf("config: and %d more problems", problems-maxProblems))
	}
	return errors.Join(errs...)
}

// validOrigin reports whether o is a serialized web origin.
func validOrigin(o string) bool {
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && o == u.Scheme+"://"+u.Host && strings.ToLower(o) == o
}

func (r *Rule) validate(at string, bad func(field, format string, args ...any)) {
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
		bad(at+".key", "must list at least one dimension (%s)", strings.Join(Dimensions, ", "))
	}
	for i, d := range r.Key {
		if !slices.Contains(Dimensions, d) {
			bad(fmt.Sprintf("%s.key[%d]", at, i), "unknown dimension %q; one of %s", d, strings.Join(Dimensions, ", "))
		} else if slices.Index(r.Key, d) != i {
			bad(fmt.Sprintf("%s.key[%d]", at, i), "dimension %q is listed twice", d)
		}
	}
	switch {
	case r.Algorithm == Ratio && !r.percent:
		bad(at+".limit", "the ratio algorithm's limit is the failure ratio that denies, a percentage such as 80%%")
	case r.Algorithm == Ratio && (r.Limit < 1 || r.Limit > 99):
		bad(at+".limit", "must be 1%% to 99%%, got %d%%", r.Limit)
	case r.Algorithm != Ratio && r.percent:
		bad(at+".limit", "a percentage is only the ratio algorithm's limit; this rule counts units: a whole number")
	case r.Algorithm != Ratio && (r.Limit < 1 || r.Limit > MaxLimit):
		bad(at+".limit", "must be 1 to %d, got %d", int64(MaxLimit), r.Limit)
	}
	switch {
	case r.Algorithm == Ratio && (r.Min < 1 || r.Min > MaxLimit):
		bad(at+".min", "must be 1 to %d attempts, got %d", int64(MaxLimit), r.Min)
	case r.Algorithm != Ratio && r.Min != 0:
		bad(at+".min", "only applies to the ratio algorithm")
	}
	if r.Algorithm == Ratio {
		switch {
		case r.Count != CountFailures:
			bad(at+".count", "the ratio algorithm counts failures (leave count out)")
		case r.Mode == ModeSoft:
			bad(at+".mode", "a ratio has no overage: enforce or shadow")
		case r.ResetOnSuccess:
			bad(at+".resetOnSuccess", "does not apply to the ratio algorithm (a success counts in its ratio)")
		case r.Lockout != nil:
			bad(at+".lockout", "does not apply to the ratio algorithm (it denies while the ratio holds)")
		}
	}
	if e := r.Elastic; e != nil {
		switch {
		case r.Algorithm != SlidingWindow || r.Count != CountFailures:
			bad(at+".elastic", "needs algorithm sliding_window and count failures (the successes are what it follows)")
		case e.Ratio <= 0 || e.Ratio > 10:
			bad(at+".elastic.ratio", "must be more than 0%% and at most 1000%%, got %g%%", float64(e.Ratio)*100)
		}
	}
	if r.Window < MinWindow || r.Window > MaxWindow {
		bad(at+".window", "must be %s to %s, got %s", MinWindow, MaxWindow, r.Window)
	} else if r.Window%time.Millisecond != 0 {
		bad(at+".window", "must be a whole number of milliseconds, got %s", r.Window)
	}
	if !slices.Contains(Algorithms, r.Algorithm) {
		bad(at+".algorithm", "unknown algorithm %q; one of %s", r.Algorithm, joinAlgorithms())
	}
	switch {
	case r.Algorithm == Distinct && (r.Of == "" || r.Of == "global" || !slices.Contains(Dimensions, r.Of)):
		bad(at+".of", "the distinct algorithm counts the distinct values of one dimension: one of %s except global", strings.Join(Dimensions, ", "))
	case r.Algorithm == Distinct && slices.Contains(r.Key, r.Of):
		bad(at+".of", "%q is also in key: one value per key cannot be counted", r.Of)
	case r.Algorithm == Distinct && r.Of == "device":
		bad(at+".of", "devices cannot be counted (untrusted clients share one value); count account or ip")
	case r.Algorithm != Distinct && r.Of != "":
		bad(at+".of", "only applies to the distinct algorithm")
	}
	if l := r.Lease; l != nil {
		switch {
		case r.Algorithm != FixedWindow || r.Count != CountRequests || r.Mode != ModeEnforce:
			bad(at+".lease", "needs algorithm fixed_window, count requests and mode enforce")
		case l.Units < 2 || l.Units > r.Limit:
			bad(at+".lease.units", "must be 2 to the rule's limit (%d), got %d", r.Limit, l.Units)
		}
	}
	switch r.Count {
	case CountRequests:
	case CountFailures:
		if r.Algorithm == Concurrency {
			bad(at+".count", "failures cannot be counted with the concurrency algorithm")
		}
	case CountSuccesses:
		if r.Algorithm != Distinct {
			bad(at+".count", "successes are counted by the distinct algorithm only (the values of attempts that succeeded)")
		}
	case CountHeld:
		if r.Algorithm == Distinct || r.Algorithm == Concurrency || r.Algorithm == Ratio {
			bad(at+".count", "held attempts are counted by fixed_window, sliding_window, token_bucket or sliding_log")
		}
	default:
		bad(at+".count", "must be %q, %q, %q or %q, got %q", CountRequests, CountFailures, CountHeld, CountSuccesses, r.Count)
	}
	switch {
	case r.Remember != 0 && r.Algorithm != Distinct:
		bad(at+".remember", "only applies to the distinct algorithm")
	case r.Remember != 0 && (r.Remember < r.Limit || r.Remember > MaxRemember):
		bad(at+".remember", "must be the limit (%d) to %d values, got %d", r.Limit, MaxRemember, r.Remember)
	}
	switch {
	case r.Mode == ModeChallenge && r.Fallback != "deny" && r.Fallback != "allow":
		bad(at+".fallback", "must be deny or allow, got %q", r.Fallback)
	case r.Mode != ModeChallenge && r.Fallback != "":
		bad(at+".fallback", "only applies to mode challenge")
	case r.Mode == ModeChallenge && r.Lease != nil:
		bad(at+".lease", "does not apply to mode challenge")
	}
	switch r.Mode {
	case ModeEnforce, ModeShadow, ModeChallenge:
		if r.Overage != 0 {
			bad(at+".overage", "only applies to mode soft")
		}
	case ModeSoft:
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
				if v != DeviceTrusted && v != DeviceUntrusted {
					bad(at+".when.device", "%q is not %s or %s", v, DeviceTrusted, DeviceUntrusted)
				}
			}
		}
	}
	if l := r.Lockout; l != nil {
		if r.Count != CountFailures {
			bad(at+".lockout", "needs count: failures (a lockout follows failed attempts)")
		}
		if r.Algorithm == Distinct {
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
	if r.ResetOnSuccess && r.Count != CountFailures {
		bad(at+".resetOnSuccess", "needs count: failures")
	}
	if r.OnStoreError != "deny" && r.OnStoreError != "allow" {
		bad(at+".onStoreError", "must be deny or allow, got %q", r.OnStoreError)
	}
}

// dimsKey names a set of dimensions whatever their order.
func dimsKey(dims []string) string {
	s := slices.Clone(dims)
	slices.Sort(s)
	return strings.Join(s, "\x00")
}

// ruleID is the short name of a rule's state among the rules keyed on the
// same dimensions (12 bits of a hash of its name and algorithm: a new
// algorithm never reads an old one's state).
func ruleID(name string, alg Algorithm) string {
	sum := sha256.Sum256([]byte(name + "\x00" + string(alg)))
	return base64.RawURLEncoding.EncodeToString(sum[:2])[:2]
}

func joinAlgorithms() string {
	s := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
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
