package guard

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// Config is what a Guard runs by: its rules and the few settings of the
// engine. Package config reads it from the product's configuration
// document (config.Config.Engine), filled and validated; New checks only
// what the engine cannot run without.
type Config struct {
	// Rules are the rate limits, in the order a decision reports them.
	Rules []Rule
	// StoreTimeout bounds one decision's work in the store; more than 0.
	StoreTimeout time.Duration
	// DenyCacheTTL caps how long a denial is answered from this
	// process's cache; 0 turns the cache off.
	DenyCacheTTL time.Duration
	// DenyCacheSize bounds the number of cached denials; at least 1
	// when the cache is on.
	DenyCacheSize int
	// IPv6Prefix is the prefix length an IPv6 client is counted by for
	// the ip dimension, 1 to 128.
	IPv6Prefix int
	// DeviceTTL is how long a device token stays valid after it is
	// issued; more than 0.
	DeviceTTL time.Duration
}

// check reports the first setting or rule the engine cannot run: one
// config.Parse refuses too, with the field named.
func (c *Config) check() error {
	switch {
	case c.StoreTimeout <= 0:
		return errors.New("guard: the store timeout must be more than 0")
	case c.DenyCacheTTL < 0 || (c.DenyCacheTTL > 0 && c.DenyCacheSize < 1):
		return errors.New("guard: the deny cache needs a ttl of 0 (off) or more and a size of at least 1")
	case c.IPv6Prefix < 1 || c.IPv6Prefix > 128:
		return fmt.Errorf("guard: the IPv6 prefix must be 1 to 128 bits, got %d", c.IPv6Prefix)
	case c.DeviceTTL <= 0:
		return errors.New("guard: the device token lifetime must be more than 0")
	}
	names := make(map[string]bool, len(c.Rules))
	states := make(map[string]string, len(c.Rules))
	for _, r := range c.Rules {
		switch {
		case names[r.Name]:
			return fmt.Errorf("guard: two rules are named %q", r.Name)
		case !slices.Contains(store.Algorithms, r.Algorithm):
			return fmt.Errorf("guard: rule %s: unknown algorithm %q", r.Name, r.Algorithm)
		case len(r.Key) == 0 || r.Limit < 1 || r.Limit > MaxLimit || r.Window <= 0:
			return fmt.Errorf("guard: rule %s needs a key, a limit of 1 to %d and a window", r.Name, int64(MaxLimit))
		}
		names[r.Name] = true
		state := dimsKey(r.Key) + "\x01" + r.StateID()
		if other, ok := states[state]; ok {
			return fmt.Errorf("guard: rules %s and %s are keyed alike and share one state id", other, r.Name)
		}
		states[state] = r.Name
	}
	return nil
}
