package config_test

import (
	"strings"
	"testing"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
)

// FuzzParseConfig: a document is accepted or refused with an error,
// never a panic; an accepted one builds a guard.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "{}", "otp: {length: 8}", "rules: []", "rules: [{name: a, action: x, key: [ip], limit: 1, window: 1s}]",
		"rules: [{name: a, action: x, key: [ip], limit: 1, window: 1s, algorithm: distinct, of: account}]",
		"store: {denyCache: {ttl: 1m, size: 1}}", "network: {allowedOrigins: ['https://a.example']}", "rules: [{lease: {units: 2}}]",
		"otp: [", "rules: {a: 1}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := config.Parse([]byte(s))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if _, err := guard.New(cfg.Engine(), nil, guard.Options{Secret: []byte("fuzz-secret-0123456789")}); err != nil && !strings.Contains(err.Error(), "store") {
			t.Fatalf("an accepted config does not build a guard: %v\n%s", err, s)
		}
	})
}
