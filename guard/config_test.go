package guard

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNewRefusesWhatTheEngineCannotRun: New checks its Config's settings
// and rules itself (config.Parse has named the field of each already).
func TestNewRefusesWhatTheEngineCannotRun(t *testing.T) {
	opts := Options{Secret: []byte("0123456789abcdef"), Backstop: nopStore{}}
	if _, err := New(testConfig(), nil, opts); err != nil {
		t.Fatalf("a valid config: %v", err)
	}
	collide := testConfig().Rules[0]
	for i := 0; collide.Name == testConfig().Rules[0].Name || collide.StateID() != testConfig().Rules[0].StateID(); i++ {
		collide.Name = "c" + strconv.Itoa(i)
	}
	for _, c := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no store timeout", func(c *Config) { c.StoreTimeout = 0 }, "store timeout"},
		{"a negative deny cache ttl", func(c *Config) { c.DenyCacheTTL = -time.Second }, "deny cache"},
		{"a deny cache of no size", func(c *Config) { c.DenyCacheSize = 0 }, "deny cache"},
		{"an IPv6 prefix of 0", func(c *Config) { c.IPv6Prefix = 0 }, "IPv6 prefix"},
		{"an IPv6 prefix of 129", func(c *Config) { c.IPv6Prefix = 129 }, "IPv6 prefix"},
		{"no device lifetime", func(c *Config) { c.DeviceTTL = 0 }, "device token"},
		{"a name twice", func(c *Config) { c.Rules = append(c.Rules, c.Rules[0]) }, "two rules are named"},
		{"an unknown algorithm", func(c *Config) { c.Rules[1].Algorithm = "leaky" }, "unknown algorithm"},
		{"no key", func(c *Config) { c.Rules[1].Key = nil }, "needs a key"},
		{"no limit", func(c *Config) { c.Rules[1].Limit = 0 }, "needs a key"},
		{"a limit too high", func(c *Config) { c.Rules[1].Limit = MaxLimit + 1 }, "needs a key"},
		{"no window", func(c *Config) { c.Rules[1].Window = 0 }, "needs a key"},
		{"one state id twice", func(c *Config) { c.Rules = append(c.Rules, collide) }, "share one state id"},
	} {
		cfg := testConfig()
		c.change(&cfg)
		if _, err := New(cfg, nil, opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
	// The deny cache off needs no size.
	cfg := testConfig()
	cfg.DenyCacheTTL, cfg.DenyCacheSize = 0, 0
	if _, err := New(cfg, nil, opts); err != nil {
		t.Errorf("the deny cache off: %v", err)
	}
}
