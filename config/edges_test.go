package config_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
)

// TestARatioRuleIsWrittenBackAsRead: a rule written back (the console's
// config page) keeps a ratio's percent sign, and nothing else gains one.
func TestARatioRuleIsWrittenBackAsRead(t *testing.T) {
	cfg, err := config.Parse([]byte(`rules:
  - {name: ratio, action: login, key: [ip], algorithm: ratio, limit: 50%, min: 4, window: 1h}
  - {name: plain, action: login, key: [ip], limit: 50, window: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := config.MarshalRules(cfg.Rules)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "limit: 50%") || strings.Count(string(out), "%") != 1 || !strings.Contains(string(out), "limit: 50\n") {
		t.Fatalf("written back:\n%s", out)
	}
	again, err := config.Parse(append([]byte("rules:\n"), out...))
	if err != nil || !slices.EqualFunc(again.Rules, cfg.Rules, func(a, b guard.Rule) bool {
		return a.Name == b.Name && a.Limit == b.Limit && a.Algorithm == b.Algorithm
	}) {
		t.Errorf("read again: %v %+v", err, again.Rules)
	}
}

// TestConfigListsAndPrefixes: a when's values are one name or a list of
// names (not a mapping); trusted proxies are addresses or CIDRs, checked.
func TestConfigListsAndPrefixes(t *testing.T) {
	for _, doc := range []string{
		"rules:\n  - {name: r, action: otp.send, key: [destination], when: {channel: sms}, limit: 5, window: 1h}\n",
		"rules:\n  - {name: r, action: otp.send, key: [destination], when: {channel: [sms, email]}, limit: 5, window: 1h}\n",
		"network: {trustedProxies: [10.0.0.0/8, \"192.0.2.7\", \"2001:db8::/32\"]}\n",
	} {
		if _, err := config.Parse([]byte(doc)); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
	for _, doc := range []string{
		"rules:\n  - {name: r, action: otp.send, key: [destination], when: {channel: {a: b}}, limit: 5, window: 1h}\n",
		"network: {trustedProxies: [10.0.0.0/99]}\n",
		"network: {trustedProxies: [10.0.0.300]}\n",
	} {
		if _, err := config.Parse([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", doc)
		}
	}
}

// TestACaptchaHasADefaultTimeout: a provider's calls are bounded at 3s
// unless the config says otherwise.
func TestACaptchaHasADefaultTimeout(t *testing.T) {
	cfg, err := config.Parse([]byte("challenge: {captcha: {provider: turnstile, siteKey: k}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Challenge.Captcha; c == nil || c.Timeout != 3*time.Second || c.VerifyURL == "" {
		t.Fatalf("%+v", c)
	}
}

// TestATokenLivesUpToADay: token.ttl is more than 0 and at most 24h.
func TestATokenLivesUpToADay(t *testing.T) {
	if c, err := config.Parse([]byte("token: {ttl: 24h}\n")); err != nil || c.Token.TTL != 24*time.Hour {
		t.Errorf("a day: %v", err)
	}
	for _, ttl := range []string{"24h0m0.001s", "0s", "-1s"} {
		if _, err := config.Parse([]byte("token: {ttl: " + ttl + "}\n")); err == nil || !strings.Contains(err.Error(), "token.ttl") {
			t.Errorf("%s: %v", ttl, err)
		}
	}
}
