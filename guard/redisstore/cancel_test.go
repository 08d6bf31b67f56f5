package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
)

// A client that hangs up is not a store that fails: a decision whose
// caller's context ended is no decision (an error), never the backstop's.
// The reviewed code took the cancelled store call for an outage and let
// the backstop, which had no state for the account, admit a login that a
// step-up rule would have challenged: a token for a half-closed request.
func TestAHangUpIsNoStoreFailure(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		cfg := parseConfig(t, "store: {timeout: 2s, denyCache: {ttl: 0s}}\nrules:\n"+networksRule)
		g, err := guard.New(cfg.Engine(), newStore(rdb), guard.Options{Secret: secret, Backstop: memstore.New(nil)})
		if err != nil {
			t.Fatal(err)
		}
		home, away := loginAt("owner", "198.18.0.1"), loginAt("owner", "203.0.113.1")
		d := allow(t, g, home)
		if _, err := g.Settle(context.Background(), home, d, guard.Success); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d, err = g.Allow(ctx, away)
		if !errors.Is(err, context.Canceled) || d.Allowed {
			t.Fatalf("a hung-up request: %+v, %v; want no decision and context.Canceled", d, err)
		}
		if d := allow(t, g, away); !d.Challenged {
			t.Fatalf("the next request from the new network: %+v", d)
		}
	})
}

// When the store fails, the backstop's copy cannot say what a distinct
// challenge rule's set held (the networks an account proved): the request
// is asked for its proof, never let in on an empty copy (a fresh process
// with Redis down let a right password in from any network).
func TestAStoreOutageAsksForTheProofOfASetItCannotSee(t *testing.T) {
	cfg := parseConfig(t, "store: {timeout: 2s, denyCache: {ttl: 0s}}\nrules:\n"+networksRule+
		"  - {name: per-account-ip, action: login, key: [account, ip], count: failures, limit: 5, window: 15m, onStoreError: allow}\n")
	g, err := guard.New(cfg.Engine(), failing{}, guard.Options{Secret: secret, Backstop: memstore.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := g.Allow(context.Background(), loginAt("owner", "203.0.113.1"))
	if err != nil || d.StoreError == nil || !d.Allowed || !d.Challenged || d.ChallengedBy != "stepup" {
		t.Fatalf("with the store down: %+v, %v; want a challenge by stepup", d, err)
	}
}

// TestASettleGivesBackToTheWindowOfItsTake: a take settled (given back)
// after its window ended gives back nothing: the window it counted in
// is over, and the current one, full of other takes, stays full (a
// decision held until the next window must not erase a count there).
func TestASettleGivesBackToTheWindowOfItsTake(t *testing.T) {
	for _, alg := range []string{"fixed_window", "sliding_window"} {
		t.Run(alg, func(t *testing.T) {
			c, st := newFixedClock(t)
			g := newGuardAt(t, st, c, "  - {name: per-destination, action: test, key: [destination], limit: 3, window: 10s, algorithm: "+alg+"}\n")
			req := request(t, "settle@example.com", "192.0.2.1")
			old := allow(t, g, req)
			if !old.Allowed {
				t.Fatalf("the first take: %+v", old)
			}
			c.advance(25 * time.Second) // its window, and the next, over
			for i := range 3 {
				if d := allow(t, g, req); !d.Allowed {
					t.Fatalf("take %d of the new window: %+v", i, d)
				}
			}
			if _, err := g.Settle(context.Background(), req, old, guard.Void); err != nil {
				t.Fatal(err)
			}
			if d := allow(t, g, req); d.Allowed {
				t.Errorf("the new window full, an old take given back: %+v, want denied", d)
			}
		})
	}
}

// TestAClusterDenialGivesBackALeasesUnitsToo: on a cluster, a take that
// one rule admitted with a lease's extra units, refused by another rule
// on another node, gives back every unit it took, the lease's too: the
// admitting rule's count is where it was.
func TestAClusterDenialGivesBackALeasesUnitsToo(t *testing.T) {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	defer flush(t, rdb)
	st := redisstore.New(rdb, redisstore.Options{})
	ctx := context.Background()
	leased := &store.Spec{ID: "ls", Algorithm: store.FixedWindow, Limit: 20, Window: time.Hour, Enforce: true}
	full := &store.Spec{ID: "fu", Algorithm: store.FixedWindow, Limit: 30, Window: time.Hour, Enforce: true}
	const a, b = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"
	for range 30 {
		if _, err := st.Do(ctx, []store.Op{{Kind: store.Take, Spec: full, Tag: b, Cost: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := st.Do(ctx, []store.Op{
		{Kind: store.Take, Spec: leased, Tag: a, Cost: 1, Extra: 4},
		{Kind: store.Take, Spec: full, Tag: b, Cost: 1},
	})
	if err != nil || res[1].Allowed {
		t.Fatalf("a take the full rule refuses: %+v, %v", res, err)
	}
	peek, err := st.Do(ctx, []store.Op{{Kind: store.Peek, Spec: leased, Tag: a, Cost: 1}})
	if err != nil || peek[0].Remaining != 20 {
		t.Errorf("the admitting rule after the denial: %+v, %v, want all 20 left", peek, err)
	}
}
