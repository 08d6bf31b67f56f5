package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
)

// cachingGuard is one process with a deny cache of a minute, and nothing
// that tells it of other processes' changes (no unblock subscription):
// what it caches, only time ends.
func cachingGuard(t *testing.T, rdb redis.UniversalClient, rules string) *guard.Guard {
	t.Helper()
	cfg := parseConfig(t, "store: {timeout: 10s, denyCache: {ttl: 1m}}\nrules:\n"+rules)
	g, err := guard.New(cfg.Engine(), redisstore.New(rdb, redisstore.Options{}), guard.Options{Secret: secret, Backstop: memstore.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestTheDenyCacheKeepsOnlyWhatTimeAloneEnds: a process caches a denial
// only where nothing but time ends it. A failure count drops when an
// attempt in flight succeeds, and a success on a resetOnSuccess pair ends
// its lockout: when a second process settles that success, the first,
// which saw the denial, admits at once. (Caching those denials, a mutant
// an outside review injected, passed every earlier test: none had a
// second process change Redis while the first held a cached denial.)
func TestTheDenyCacheKeepsOnlyWhatTimeAloneEnds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		t.Run("a failure count, and a success settled elsewhere", func(t *testing.T) {
			rules := "  - {name: fails, action: login, key: [account], count: failures, limit: 2, window: 1h}\n"
			first, second := cachingGuard(t, rdb, rules), cachingGuard(t, rdb, rules)
			req := loginReq("cached-failures", "192.0.2.71")
			allow(t, first, req) // two attempts in flight: failures until settled
			d := allow(t, first, req)
			for range 2 {
				if d := allow(t, first, req); d.Allowed || d.RetryAfter <= 0 {
					t.Fatalf("a third attempt while two are in flight: %+v", d)
				}
			}
			// the second process hears that one of them succeeded
			if _, err := second.Settle(ctx, req, d, guard.Success); err != nil {
				t.Fatal(err)
			}
			if d := allow(t, first, req); !d.Allowed {
				t.Fatalf("a success settled through another process: the first still denies (cached %v): %+v", d.Rules[0].Cached, d)
			}
		})
		t.Run("a lockout, and a success settled elsewhere", func(t *testing.T) {
			rules := "  - {name: pair, action: login, key: [account, ip], count: failures, limit: 2, window: 1h, resetOnSuccess: true, lockout: {initial: 10m, factor: 2, max: 1h}}\n"
			first, second := cachingGuard(t, rdb, rules), cachingGuard(t, rdb, rules)
			req := loginReq("cached-lockout", "192.0.2.72")
			failLogin(t, first, req)
			failLogin(t, first, req)
			for range 2 {
				if d := allow(t, first, req); d.Allowed || !d.Rules[0].Locked {
					t.Fatalf("after the limit's failures: %+v", d)
				}
			}
			// the owner's success reported through another process (an
			// outcome without its decision) clears the pair's lockout
			if _, err := second.Settle(ctx, req, guard.Decision{}, guard.Success); err != nil {
				t.Fatal(err)
			}
			if d := allow(t, first, req); !d.Allowed {
				t.Fatalf("a success settled through another process: the first still denies (cached %v): %+v", d.Rules[0].Cached, d)
			}
		})
		t.Run("a denial that time alone ends is cached", func(t *testing.T) {
			// the other side: without this the two above would pass with
			// no deny cache at all
			g := cachingGuard(t, rdb, "  - {name: plain, action: otp.send, key: [account], limit: 1, window: 1h}\n")
			req := loginReq("cached-plain", "192.0.2.73")
			req.Action = "otp.send"
			allow(t, g, req)
			allow(t, g, req)
			if d := allow(t, g, req); d.Allowed || !d.Rules[0].Cached {
				t.Fatalf("a window's denial is not cached: %+v", d)
			}
		})
	})
}
