package app_test

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// TestWarnsOfAnEvictingRedis: an allkeys-* maxmemory-policy can evict
// live counters (limits silently reset): the server says so at start-up.
func TestWarnsOfAnEvictingRedis(t *testing.T) {
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	rdb := rs.Client()
	defer rdb.Close()
	ctx := context.Background()
	_, key, _ := ed25519.GenerateKey(nil)
	for policy, warn := range map[string]bool{"allkeys-lru": true, "allkeys-lfu": true, "noeviction": false, "volatile-ttl": false} {
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		var logs testutil.Buffer
		_, err := app.New(ctx, app.Settings{Redis: rdb, Secret: []byte("0123456789abcdef0123"), Log: slog.New(slog.NewTextHandler(&logs, nil))},
			config.Default(), app.Keys{Signing: key})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "maxmemory-policy may evict"); got != warn {
			t.Errorf("%s: warned %v, want %v: %s", policy, got, warn, logs.String())
		}
	}
}
