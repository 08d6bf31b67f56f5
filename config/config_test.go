package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/store"
)

func TestDefault(t *testing.T) {
	c := Default()
	if c.OTP.Length != 6 || c.OTP.TTL != 10*time.Minute || c.OTP.MaxAttempts != 5 || c.Store.Timeout != 50*time.Millisecond ||
		c.Token.TTL != 5*time.Minute || c.Network.IPv6Prefix != 64 || len(c.Rules) != 26 || c.Devices.TTL != 4320*time.Hour {
		t.Fatalf("defaults: %+v", c)
	}
	byName := map[string]guard.Rule{}
	for _, r := range c.Rules {
		byName[r.Name] = r
	}
	if r := byName["login-per-ip"]; r.Algorithm != store.TokenBucket || r.Count != guard.CountFailures || r.OnStoreError != "allow" {
		t.Errorf("login-per-ip: %+v", r)
	}
	if r := byName["otp-send-per-destination"]; r.Algorithm != store.FixedWindow || r.Mode != guard.ModeEnforce || r.OnStoreError != "deny" || r.Limit != 2 || r.Window != time.Minute {
		t.Errorf("otp-send-per-destination: %+v", r)
	}
	if r := byName["login-per-account-ip"]; r.Lockout == nil || r.Lockout.Max != time.Hour || r.Lockout.Reset != 24*time.Hour || !r.ResetOnSuccess {
		t.Errorf("login-per-account-ip: %+v", r)
	}
	// The default asn rules join once a database is configured.
	if _, ok := byName["login-failure-ratio-per-asn"]; ok {
		t.Error("a default rule on asn without a database")
	}
	c, err := Parse([]byte("network: {asnDatabase: /var/task/asn.mmdb}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rules) != 27 || c.Rules[19].Name != "login-failure-ratio-per-asn" {
		t.Errorf("with a database: %d rules", len(c.Rules))
	}
}

func TestConfigOverlay(t *testing.T) {
	c, err := Parse([]byte("otp: {length: 8, sms: {defaultRegion: GB}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.OTP.Length != 8 || c.OTP.SMS.DefaultRegion != "GB" || c.OTP.TTL != 10*time.Minute || len(c.OTP.SMS.AllowedTypes) != 2 || len(c.Rules) != len(Default().Rules) {
		t.Fatalf("overlay: %+v", c.OTP)
	}
	c, err = Parse([]byte("network: {asnDatabase: /x.mmdb}\nrules:\n  - {name: r, action: login, key: [asn], limit: 80%, window: 1h, algorithm: ratio}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Rules[0]; r.Limit != 80 || r.Min != 20 || r.Count != guard.CountFailures {
		t.Fatalf("a ratio rule: %+v", r)
	}
	c, err = Parse([]byte("rules:\n  - {name: only, action: otp.send, key: [ip], limit: 3, window: 1m, mode: soft}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rules) != 1 || c.Rules[0].Overage != 0.1 {
		t.Fatalf("a rules list replaces the defaults whole: %+v", c.Rules)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	rule := func(s string) string {
		return "rules:\n  - {name: r, action: login, key: [ip], limit: 5, window: 1m" + s + "}\n"
	}
	cases := []struct{ doc, want string }{
		{rule(", algorithm: leaky"), `rules[0] (r).algorithm: unknown algorithm "leaky"`},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 0, window: 1m}\n", "rules[0] (r).limit: must be 1"},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: -3, window: 1m}\n", "rules[0] (r).limit"},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 5, window: 1m}\n  - {name: r, action: login, key: [ip], limit: 5, window: 1m}\n", `rules[1].name: "r" is already the name of rules[0]`},
		{"rules:\n  - {name: r, action: login, key: [ipaddr], limit: 5, window: 1m}\n", `rules[0] (r).key[0]: unknown dimension "ipaddr"`},
		{"rules:\n  - {name: r, action: login, key: [], limit: 5, window: 1m}\n", "rules[0] (r).key: must list at least one dimension"},
		{"rules:\n  - {name: r, action: login, key: [ip, ip], limit: 5, window: 1m}\n", `rules[0] (r).key[1]: dimension "ip" is listed twice`},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 5, window: 10ms}\n", "rules[0] (r).window: must be 100ms to 720h0m0s, got 10ms"},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 5, window: 60}\n", "line 2: cannot unmarshal !!int `60` into time.Duration"},
		{rule(", lockout: {initial: 1m, factor: 2, max: 1h}"), "rules[0] (r).lockout: needs count: failures"},
		{rule(", count: failures, lockout: {initial: 1m, factor: 0.5, max: 1h}"), "rules[0] (r).lockout.factor"},
		{rule(", count: failures, lockout: {initial: 1h, factor: 2, max: 1m}"), "rules[0] (r).lockout.max"},
		{rule(", count: failures, algorithm: concurrency"), "rules[0] (r).count: failures cannot be counted with the concurrency algorithm"},
		{rule(", count: successes"), "rules[0] (r).count: successes are counted by the distinct algorithm only"},
		{rule(", count: tries"), `rules[0] (r).count: must be "requests", "failures", "held" or "successes"`},
		{rule(", remember: 10"), "rules[0] (r).remember: only applies to the distinct algorithm"},
		{rule(", algorithm: distinct, of: account, remember: 4"), "rules[0] (r).remember: must be the limit (5) to 10000 values, got 4"},
		{rule(", algorithm: distinct, of: account, remember: 10001"), "rules[0] (r).remember: must be the limit (5) to 10000 values"},
		{rule(", mode: dry-run"), `rules[0] (r).mode: must be enforce, shadow, soft or challenge`},
		{rule(", overage: 10%"), "rules[0] (r).overage: only applies to mode soft"},
		{rule(", mode: soft, overage: 1500%"), "rules[0] (r).overage: must be more than 0% and at most 1000%, got 1500%"},
		{rule(", mode: soft, overage: -5%"), "rules[0] (r).overage: must be more than 0% and at most 1000%, got -5%"},
		{rule(", when: {country: US}"), "rules[0] (r).when.country: unknown filter"},
		{rule(", onStoreError: ignore"), `rules[0] (r).onStoreError: must be deny or allow`},
		{rule(", resetOnSuccess: true"), "rules[0] (r).resetOnSuccess: needs count: failures"},
		{rule(", color: red"), "field color not found"},
		{"rules:\n  - {name: 'bad name!', action: login, key: [ip], limit: 5, window: 1m}\n", "rules[0].name"},
		{"rules:\n  - {name: r, action: Login, key: [ip], limit: 5, window: 1m}\n", "rules[0] (r).action"},
		{"otp: {length: 4}", "otp.length: must be 6 to 10"},
		{"otp: {ttl: 11m}", "otp.ttl"},
		{"otp: {maxAttempts: 0}", "otp.maxAttempts"},
		{"otp: {purposes: []}", "otp.purposes"},
		{"otp: {sms: {defaultRegion: XX}}", "otp.sms.defaultRegion"},
		{"otp: {sms: {allowedCountries: [US, Narnia]}}", "otp.sms.allowedCountries[1]"},
		{"otp: {sms: {allowedTypes: [cellular]}}", "otp.sms.allowedTypes[0]"},
		{"token: {ttl: 0s}", "token.ttl"},
		{"network: {trustedProxies: [10.0.0.0/33]}", "network.trustedProxies[0]"},
		{"network: {ipv6Prefix: 16}", "network.ipv6Prefix"},
		{"store: {timeout: 0s}", "store.timeout"},
		{"store: {timeout: soon}", "line 1: cannot unmarshal !!str `soon`"},
		{"otp: [1, 2]", "cannot unmarshal"},
		{"otp: {length: 6}\n---\notp: {length: 7}\n", "more than one YAML document"},
		// docs/contract.md §7
		{rule(", algorithm: ratio"), "rules[0] (r).limit: the ratio algorithm's limit is the failure ratio that denies, a percentage such as 80%"},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 100%, window: 1m, algorithm: ratio}\n", "rules[0] (r).limit: must be 1% to 99%, got 100%"},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 80%, window: 1m}\n", "rules[0] (r).limit: a percentage is only the ratio algorithm's limit"},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 80%, window: 1m, algorithm: ratio, min: 0}\n  - {name: s, action: login, key: [ip], limit: 80%, window: 1m, algorithm: ratio, min: -1}\n", "rules[1] (s).min: must be 1 to"},
		{rule(", min: 5"), "rules[0] (r).min: only applies to the ratio algorithm"},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 80%, window: 1m, algorithm: ratio, count: requests}\n", "rules[0] (r).count: the ratio algorithm counts failures"},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 80%, window: 1m, algorithm: ratio, lockout: {initial: 1m, factor: 2, max: 1h}}\n", "rules[0] (r).lockout: does not apply to the ratio algorithm"},
		{"rules:\n  - {name: r, action: login, key: [ip], limit: 80x%, window: 1m, algorithm: ratio}\n", "cannot unmarshal"},
		{rule(", count: failures, elastic: {ratio: 20%}"), "rules[0] (r).elastic: needs algorithm sliding_window and count failures"},
		{rule(", algorithm: sliding_window, count: failures, elastic: {ratio: 0%}"), "rules[0] (r).elastic.ratio: must be more than 0%"},
		{"rules:\n  - {name: r, action: login, key: [asn], limit: 5, window: 1m}\n", "rules[0] (r).key: the asn dimension needs an ASN database: set network.asnDatabase"},
		{rule(", when: {device: known}"), `rules[0] (r).when.device: "known" is not trusted or untrusted`},
		{rule(", algorithm: distinct, of: device"), "rules[0] (r).of: devices cannot be counted"},
		{"devices: {ttl: 10m}", "devices.ttl: must be 1h to 400 days"},
		{"devices: {ttl: 9601h}", "devices.ttl: must be 1h to 400 days"},
		{"store: {denyCache: {ttl: 1s, size: 10000001}}", "store.denyCache.size"},
		{"store: {denyCache: {ttl: 1s, size: 0}}", "store.denyCache.size"},
		{rule(", count: failures, lockout: {initial: 1m, factor: 2, max: 1h, reset: 30m}"), "rules[0] (r).lockout.reset: must be at least lockout.max (1h0m0s)"},
		{rule(", count: failures, lockout: {initial: 1m, factor: 2, max: 1h, reset: 100000h}"), "rules[0] (r).lockout.reset: must be at least lockout.max (1h0m0s) and at most"},
		// docs/contract.md §6
		{"rules:\n  - {name: r, action: otp.send, key: [ip], limit: 5, window: 1m, mode: challenge}\n", "rules[0] (r).mode: a otp.send rule in mode challenge asks for a CAPTCHA: configure challenge.captcha"},
		{rule(", mode: challenge, fallback: maybe"), `rules[0] (r).fallback: must be deny or allow, got "maybe"`},
		{rule(", fallback: allow"), "rules[0] (r).fallback: only applies to mode challenge"},
		{"challenge: {captcha: {provider: recaptcha2, siteKey: k}}", `challenge.captcha.provider: must be turnstile, hcaptcha or recaptcha, got "recaptcha2"`},
		{"challenge: {captcha: {provider: turnstile}}", "challenge.captcha.siteKey: must not be empty"},
		{"challenge: {captcha: {provider: turnstile, siteKey: k, verifyUrl: 'ftp://x'}}", "challenge.captcha.verifyUrl"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q):\n got  %v\n want an error containing %q", c.doc, err, c.want)
		}
	}
}

// TestBoundsAreInclusive: a value at a documented bound is accepted.
func TestBoundsAreInclusive(t *testing.T) {
	for _, doc := range []string{"rules:\n  - {name: r, action: login, key: [ip], limit: 5, window: 1m, mode: soft, overage: 1000%}",
		"rules:\n  - {name: r, action: login, key: [ip], limit: 5, window: 1m, count: failures, lockout: {initial: 1m, factor: 2, max: 1h, reset: 1h}}",
		"store: {denyCache: {ttl: 1s, size: 1}}", "store: {denyCache: {ttl: 1s, size: 10000000}}", "devices: {ttl: 1h}", "devices: {ttl: 9600h}", "network: {ipv6Prefix: 32}", "network: {ipv6Prefix: 128}", "store: {timeout: 10s}"} {
		if _, err := Parse([]byte(doc)); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

// TestThePhoneTypesAreTheConfigs: the number types guard/identity reads
// are the names otp.sms.allowedTypes accepts, no more, no fewer.
func TestThePhoneTypesAreTheConfigs(t *testing.T) {
	for _, name := range identity.PhoneTypes() {
		if _, err := Parse([]byte("otp: {sms: {allowedTypes: [" + name + "]}}")); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := Parse([]byte("otp: {sms: {allowedTypes: [cellular]}}"))
	if err == nil || !strings.Contains(err.Error(), "is not one of "+strings.Join(identity.PhoneTypes(), ", ")) {
		t.Errorf("an unknown type: %v, want the list of %v", err, identity.PhoneTypes())
	}
	if !slices.IsSorted(identity.PhoneTypes()) {
		t.Error("identity.PhoneTypes is not sorted")
	}
}
