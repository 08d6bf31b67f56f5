package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// guardWith builds a guard with the store section given (deny cache).
func guardWith(t testing.TB, rdb redis.UniversalClient, storeYAML, rules string) *guard.Guard {
	t.Helper()
	cfg, err := config.Parse([]byte("store: " + storeYAML + "\nrules:\n" + rules))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), newStore(rdb), guard.Options{Secret: secret, Backstop: memstore.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestDenyCache: a denial is answered from the process until its
// retry-after, without Redis; it never outlives what Redis would answer;
// an unblock in the same process ends it at once, in another process
// within the cache's TTL; concurrency and failure-count denials are not
// cached.
func TestDenyCache(t *testing.T) {
	rdb := single.Client()
	defer rdb.Close()
	var n atomic.Int64
	rdb.AddHook(redistest.RoundTrips{N: &n})
	defer flush(t, rdb)
	const rules = `
  - {name: per-destination, action: test, key: [destination], limit: 2, window: 1s}
`
	g := guardWith(t, rdb, "{timeout: 10s, denyCache: {ttl: 5s, size: 100}}", rules)
	req := request(t, "cached@example.com", "192.0.2.1")
	ctx := context.Background()
	for range 2 {
		if d := allow(t, g, req); !d.Allowed {
			t.Fatalf("denied early: %+v", d)
		}
	}
	first := allow(t, g, req)
	if first.Allowed || first.Rules[0].Cached {
		t.Fatalf("the first denial must come from Redis: %+v", first)
	}
	n.Store(0)
	for range 50 {
		d := allow(t, g, req)
		if d.Allowed || !d.Rules[0].Cached || d.DeniedBy != "per-destination" || d.RetryAfter <= 0 || d.RetryAfter > first.RetryAfter {
			t.Fatalf("a repeat: %+v", d)
		}
	}
	if got := n.Load(); got != 0 {
		t.Errorf("50 cached denials made %d round trips, want 0", got)
	}
	// Past the retry-after Redis admits again, and so does the guard: the
	// cache never answers longer than Redis would.
	time.Sleep(first.RetryAfter + 50*time.Millisecond)
	if d := allow(t, g, req); !d.Allowed {
		t.Fatalf("after the retry-after: %+v", d)
	}

	// Unblock in this process ends the cached denial at once.
	allow(t, g, req)
	if d := allow(t, g, req); d.Allowed {
		t.Fatalf("not denied: %+v", d)
	}
	other := guardWith(t, rdb, "{timeout: 10s, denyCache: {ttl: 300ms, size: 100}}", rules)
	if d := allow(t, other, req); d.Allowed || d.Rules[0].Cached {
		t.Fatalf("the other process: %+v", d)
	}
	if _, err := g.Unblock(ctx, "destination", req.Subject); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, g, req); !d.Allowed {
		t.Fatalf("after the unblock, this process still denies: %+v", d)
	}
	// The other process answers from its cache until its TTL ends.
	if d := allow(t, other, req); d.Allowed || !d.Rules[0].Cached {
		t.Fatalf("the other process within its cache TTL: %+v", d)
	}
	time.Sleep(350 * time.Millisecond)
	if d := allow(t, other, req); !d.Allowed {
		t.Fatalf("the other process after its cache TTL: %+v", d)
	}

	// A concurrency denial is never cached: a release ends it at once.
	g = guardWith(t, rdb, "{timeout: 10s, denyCache: {ttl: 5s, size: 100}}", `
  - {name: inflight, action: test, key: [ip], limit: 1, window: 10s, algorithm: concurrency}
`)
	ipOnly := request(t, "someone-else@example.com", "192.0.2.9")
	held := allow(t, g, ipOnly)
	if d := allow(t, g, ipOnly); d.Allowed || d.DeniedBy != "inflight" {
		t.Fatalf("second in flight: %+v", d)
	}
	if err := g.Release(ctx, ipOnly, held.Lease); err != nil {
		t.Fatal(err)
	}
	if d := allow(t, g, ipOnly); !d.Allowed {
		t.Fatalf("after the release: %+v", d)
	}
}

// TestLeases: a process takes lease.units at once and pays from them
// locally; two processes hammering one rule never admit more than the
// limit.
func TestLeases(t *testing.T) {
	rdb := single.Client()
	defer rdb.Close()
	var n atomic.Int64
	rdb.AddHook(redistest.RoundTrips{N: &n})
	defer flush(t, rdb)
	const rules = `
  - {name: global, action: test, key: [global], limit: 100, window: 1h, lease: {units: 10}}
`
	store := "{timeout: 10s, denyCache: {ttl: 0s}}"
	g := guardWith(t, rdb, store, rules)
	allow(t, g, request(t, "warm@example.com", "192.0.2.1")) // loads the library, takes the first lease
	n.Store(0)
	leased := 0
	for i := range 9 {
		d := allow(t, g, request(t, fmt.Sprintf("u%d@example.com", i), "192.0.2.1"))
		if !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
		if d.Rules[0].Leased {
			leased++
		}
	}
	if leased != 9 || n.Load() != 0 {
		t.Errorf("9 admissions: %d leased, %d round trips; want 9 and 0", leased, n.Load())
	}

	// Two processes taking turns: every leased unit is spent, so exactly
	// the limit is admitted.
	flush(t, rdb)
	a, b := guardWith(t, rdb, store, rules), guardWith(t, rdb, store, rules)
	turns := 0
	for i := range 300 {
		g := a
		if i%2 == 1 {
			g = b
		}
		if allow(t, g, request(t, fmt.Sprintf("t%d@example.com", i), "192.0.2.1")).Allowed {
			turns++
		}
	}
	if turns != 100 {
		t.Errorf("two processes taking turns admitted %d, want exactly 100", turns)
	}

	// Two processes, 400 requests: never more than the limit (what the
	// first process holds unused is stranded until the window ends, so
	// fewer may be admitted, never more).
	flush(t, rdb)
	a, b = guardWith(t, rdb, store, rules), guardWith(t, rdb, store, rules)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 400 {
		g := a
		if i%2 == 1 {
			g = b
		}
		wg.Go(func() {
			d, err := g.Allow(context.Background(), request(t, fmt.Sprintf("h%d@example.com", i), "192.0.2.1"))
			if err == nil && d.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("two processes with leases of 10 admitted %d of a limit of 100", admitted.Load())
	if got := admitted.Load(); got > 100 || got < 100-2*10 {
		t.Errorf("admitted %d, want 80 to 100 (never over the limit)", got)
	}
}

// TestADeniedTakeOfManyUnitsIsNotCached: a request for more units than
// are left (AllowN) is refused, but a request for one that fits is not:
// such a denial is not cached, and the next request of one unit is asked
// of Redis and admitted.
func TestADeniedTakeOfManyUnitsIsNotCached(t *testing.T) {
	rdb := single.Client()
	defer rdb.Close()
	defer flush(t, rdb)
	const rules = `
  - {name: per-destination, action: test, key: [destination], limit: 3, window: 1m}
`
	g := guardWith(t, rdb, "{timeout: 10s, denyCache: {ttl: 5s, size: 100}}", rules)
	req := request(t, "many@example.com", "192.0.2.1")
	ctx := context.Background()
	if d := allow(t, g, req); !d.Allowed {
		t.Fatalf("the first: %+v", d)
	}
	d, err := g.AllowN(ctx, req, 5)
	if err != nil || d.Allowed {
		t.Fatalf("5 units with 2 left: %+v, %v, want denied", d, err)
	}
	if d := allow(t, g, req); !d.Allowed || d.Rules[0].Cached {
		t.Errorf("one unit with 2 left, after a denial of 5: %+v, want admitted by Redis", d)
	}
}
