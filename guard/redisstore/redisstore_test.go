package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/pacer"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/localredis"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

var (
	single  *redistest.Server
	cluster *redistest.Cluster
	// double is ElastiCache Serverless as the stack creates it (see
	// redistest.Serverless): the third backend of every store test.
	double *redistest.Serverless
	admins sync.Map // a client of the functions' user -> one with every right, for the tests' own reads
)

func TestMain(m *testing.M) {
	var err error
	if single, err = redistest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if cluster, err = redistest.StartCluster(3); err != nil {
		single.Close()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	access, err := redistest.TemplateAccessString(templatePath)
	if err == nil {
		double, err = redistest.StartServerless(redistest.ServerlessOptions{AccessString: access, NoScriptEvery: 11})
	}
	if err != nil {
		single.Close()
		cluster.Close()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	// Every store test ran on the double as the stack's user: the ACL
	// refused none of what the store sent.
	if d, err := double.Denials(context.Background()); err != nil || len(d) > 0 {
		fmt.Fprintf(os.Stderr, "the stack's cache user was refused on the Serverless double: %v %v\n", d, err)
		code = 1
	}
	single.Close()
	cluster.Close()
	double.Close()
	os.Exit(code)
}

var secret = []byte("test-secret-0123456789")

// backend is a Redis the tests run against.
type backend struct {
	name   string
	client func() redis.UniversalClient
}

var backends = []backend{
	{"redis", func() redis.UniversalClient { return single.Client() }},
	{"cluster", func() redis.UniversalClient { return cluster.Client() }},
	{"serverless", func() redis.UniversalClient {
		// the client the functions build from REDIS_URL, as the stack's user
		rdb, err := redisstore.NewClient(double.URL())
		if err != nil {
			panic(err)
		}
		admins.Store(rdb, double.Admin())
		return rdb
	}},
}

// adminOf is a client of rdb's server(s) that may read every key and
// flush: rdb itself, except for the double, whose functions' user may not.
func adminOf(rdb redis.UniversalClient) redis.UniversalClient {
	if a, ok := admins.Load(rdb); ok {
		return a.(redis.UniversalClient)
	}
	return rdb
}

// forEachBackend runs f against a real redis-server and a real cluster;
// afterwards it checks that every guard key has a TTL, then empties Redis.
func forEachBackend(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			rdb := b.client()
			t.Cleanup(func() {
				ctx := context.Background()
				bad, err := redistest.KeysWithoutTTL(ctx, adminOf(rdb), "og:*")
				if err != nil {
					t.Errorf("scan keys: %v", err)
				}
				if len(bad) > 0 {
					t.Errorf("guard keys without a TTL: %v", bad)
				}
				flush(t, rdb)
				rdb.Close()
			})
			f(t, rdb)
		})
	}
}

func flush(t testing.TB, rdb redis.UniversalClient) {
	ctx := context.Background()
	rdb = adminOf(rdb)
	var err error
	if c, ok := rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.FlushAll(ctx).Err() })
	} else {
		err = rdb.FlushAll(ctx).Err()
	}
	if err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// newGuard builds a guard over st with the given rules. The deny cache is
// off, so that every decision reaches the store under test.
func newGuard(t testing.TB, st store.Store, yamlRules string) *guard.Guard {
	t.Helper()
	cfg, err := config.Parse([]byte("store: {timeout: 10s, denyCache: {ttl: 0s}}\nrules:\n" + yamlRules))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), st, guard.Options{Secret: secret, Backstop: memstore.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// newGuardAt is newGuard whose backstop keeps the fixed clock's time, as
// the store does.
func newGuardAt(t testing.TB, st store.Store, c *fixedClock, yamlRules string) *guard.Guard {
	t.Helper()
	cfg, err := config.Parse([]byte("store: {timeout: 10s, denyCache: {ttl: 0s}}\nrules:\n" + yamlRules))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), st, guard.Options{Secret: secret, Backstop: memstore.New(func() time.Time { return c.now })})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func newStore(rdb redisstore.Client) *redisstore.Store {
	return redisstore.New(rdb, redisstore.Options{})
}

func subject(t testing.TB, email, ip string) guard.Subject {
	t.Helper()
	d, err := identity.ParseEmail(email)
	if err != nil {
		t.Fatal(err)
	}
	a, err := identity.ParseIP(ip)
	if err != nil {
		t.Fatal(err)
	}
	return guard.Subject{Destination: d, IP: a, Account: "alice"}
}

func request(t testing.TB, email, ip string) guard.Request {
	return guard.Request{Action: "test", Subject: subject(t, email, ip)}
}

func allow(t testing.TB, g *guard.Guard, req guard.Request) guard.Decision {
	t.Helper()
	d, err := g.Allow(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if d.StoreError != nil {
		t.Fatalf("store error: %v", d.StoreError)
	}
	return d
}

func TestConcurrentRequestsAdmitExactlyTheLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		st := newStore(rdb)
		for _, alg := range store.Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				// (a ratio admits min attempts: in flight, they are all failures)
				g := newGuard(t, st, fmt.Sprintf(`  - {name: one-key, action: test, key: [destination], %s, window: 1h, algorithm: %s%s}`, limit(alg, 10), alg, of(alg, "account")))
				req := request(t, "victim-"+string(alg)+"@example.com", "192.0.2.1")
				// For distinct, every request brings a new account: the
				// limit is on how many distinct ones one destination sees.
				if got := hammerEach(t, g, 500, func(i int) guard.Request {
					r := req
					r.Subject.Account = fmt.Sprintf("account-%d", i)
					return r
				}); got != 10 {
					t.Fatalf("%d of 500 concurrent requests admitted, want exactly 10", got)
				}
			})
		}
	})
}

// limit is the limit members of a rule of algorithm alg that admits n:
// a ratio's min.
func limit(alg store.Algorithm, n int) string {
	if alg == store.Ratio {
		return fmt.Sprintf("limit: 50%%, min: %d", n)
	}
	return fmt.Sprintf("limit: %d", n)
}

// of is the `of` member a rule of algorithm alg needs.
func of(alg store.Algorithm, dim string) string {
	if alg == store.Distinct {
		return ", of: " + dim
	}
	return ""
}

// hammer sends n concurrent requests and returns how many were admitted.
func hammer(t *testing.T, g *guard.Guard, req guard.Request, n int) int64 {
	return hammerEach(t, g, n, func(int) guard.Request { return req })
}

// hammerEach sends n concurrent requests, the i-th req(i), and returns how
// many were admitted.
func hammerEach(t *testing.T, g *guard.Guard, n int, req func(i int) guard.Request) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			d, err := g.Allow(context.Background(), req(i))
			if err != nil || d.StoreError != nil {
				t.Errorf("allow: %v %v", err, d.StoreError)
				return
			}
			if d.Allowed {
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return admitted.Load()
}

const threeRules = `
  - {name: per-destination, action: test, key: [destination], limit: 10, window: 1h}
  - {name: per-ip, action: test, key: [ip], limit: 1000, window: 1h, algorithm: sliding_window}
  - {name: global, action: test, key: [global], limit: 1000, window: 1h, algorithm: token_bucket}
`

// Across three rules (three slots on the cluster), still exactly the limit,
// and the denied requests gave back what the other rules had taken.
func TestConcurrentMultiRuleRequests(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), threeRules)
		req := request(t, "victim@example.com", "192.0.2.7")
		if got := hammer(t, g, req, 500); got != 10 {
			t.Fatalf("%d of 500 admitted, want exactly 10", got)
		}
		d := allow(t, g, request(t, "other@example.com", "192.0.2.7"))
		if !d.Allowed {
			t.Fatalf("a fresh destination was denied: %+v", d)
		}
		for _, r := range d.Rules[1:] {
			if r.Remaining != 1000-11 {
				t.Errorf("%s: remaining %d, want %d (only admitted requests consume)", r.Rule, r.Remaining, 1000-11)
			}
		}
	})
}

// ownKey is the key of rule id's own state for tag: og:{tag}id, and a
// letter after it where a fixed window keeps its end in the value
// (endInValue). It must exist.
func ownKey(t *testing.T, rdb redis.UniversalClient, tag, id string) string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "og:{"+tag+"}"+id+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return len(k) > len("og:{"+tag+"}"+id)+1 })
	if len(keys) != 1 {
		t.Fatalf("the own keys of %s for %s: %q, want one", id, tag, keys)
	}
	return keys[0]
}

// ownCount is the count of a fixed window's own key holding v: v itself,
// or where the key ends in a letter k past the rule's id (its end in the
// value, endInValue), v mod 2^(53 - (k - 'a' + 10)).
func ownCount(key, v string) string {
	i := strings.LastIndexByte(key, '}')
	if i < 0 || len(key)-i != 4 || key[len(key)-1] < 'a' || key[len(key)-1] > 'z' {
		return v
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return v
	}
	return strconv.FormatInt(n%(int64(1)<<(53-(int(key[len(key)-1]-'a')+10))), 10)
}

// dump returns every guard key's value, without TTLs.
func dump(t *testing.T, rdb redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	rdb = adminOf(rdb)
	out := map[string]string{}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, "og:*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			var v string
			switch typ := c.Type(ctx, k).Val(); typ {
			case "string":
				v = c.Get(ctx, k).Val()
			case "hash":
				v = fmt.Sprint(c.HGetAll(ctx, k).Val())
			case "zset":
				v = fmt.Sprint(c.ZRangeWithScores(ctx, k, 0, -1).Val())
			default:
				v = typ
			}
			mu.Lock()
			out[k] = v
			mu.Unlock()
		}
		return nil
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, read)
	} else {
		err = read(ctx, rdb.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDeniedRequestConsumesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, alg := range store.Algorithms {
			t.Run(string(alg), func(t *testing.T) {
				g := newGuard(t, newStore(rdb), fmt.Sprintf(`
  - {name: per-destination, action: test, key: [destination], limit: 2, window: 1h}
  - {name: per-ip, action: test, key: [ip], %[4]s, window: 1h, algorithm: %[1]s%[2]s}
  - {name: per-account, action: test, key: [account], %[4]s, window: 1h, algorithm: %[1]s%[3]s}
  - {name: global, action: test, key: [global], %[4]s, window: 1h, algorithm: %[1]s%[2]s}
`, alg, of(alg, "account"), of(alg, "ip"), limit(alg, 100)))
				req := request(t, "victim-"+string(alg)+"@example.com", "192.0.2.9")
				for i := range 2 {
					if d := allow(t, g, req); !d.Allowed {
						t.Fatalf("request %d denied: %+v", i, d)
					}
				}
				before := dump(t, rdb)
				for range 20 {
					d := allow(t, g, req)
					if d.Allowed || d.DeniedBy != "per-destination" || d.RetryAfter <= 0 {
						t.Fatalf("want a denial by per-destination with a retry-after, got %+v", d)
					}
				}
				if after := dump(t, rdb); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Fatalf("denied requests changed the counters:\nbefore %v\nafter  %v", before, after)
				}
				flush(t, rdb)
			})
		}
	})
}

// sixGroups are rules on six different keys: six hash tags, spread over
// every master of a three-master cluster.
const sixGroups = `
  - {name: per-destination, action: test, key: [destination], limit: 10, window: 1h}
  - {name: per-ip, action: test, key: [ip], limit: 1000, window: 1h, algorithm: sliding_window}
  - {name: global, action: test, key: [global], limit: 100000, window: 1h, algorithm: token_bucket}
  - {name: per-account, action: test, key: [account], limit: 1000, window: 1h}
  - {name: per-net, action: test, key: [ip/56], limit: 1000, window: 1h}
  - {name: per-pair, action: test, key: [destination, ip], limit: 1000, window: 1h}
`

// TestOneRoundTripPerNode: one script call per decision on a single node;
// on a cluster at most one round trip per node per phase (two phases).
func TestOneRoundTripPerNode(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		var n atomic.Int64
		rdb := single.Client()
		defer rdb.Close()
		rdb.AddHook(redistest.RoundTrips{N: &n})
		g := newGuard(t, newStore(rdb), sixGroups)
		allow(t, g, request(t, "warm@example.com", "192.0.2.1")) // loads the script
		n.Store(0)
		for i := range 20 {
			allow(t, g, request(t, fmt.Sprintf("u%d@example.com", i), "192.0.2.1"))
		}
		if got := n.Load(); got != 20 {
			t.Fatalf("%d round trips for 20 decisions, want 20", got)
		}
		flush(t, rdb)
	})
	t.Run("cluster", func(t *testing.T) {
		var mu sync.Mutex
		perNode := map[string]*atomic.Int64{}
		rdb := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: cluster.Addrs(), ContextTimeoutEnabled: true,
			NewClient: func(opt *redis.Options) *redis.Client {
				c := redis.NewClient(opt)
				mu.Lock()
				n := &atomic.Int64{}
				perNode[opt.Addr] = n
				mu.Unlock()
				c.AddHook(redistest.RoundTrips{N: n})
				return c
			},
		})
		defer rdb.Close()
		st := newStore(rdb)
		if err := st.Preload(context.Background()); err != nil {
			t.Fatal(err)
		}
		g := newGuard(t, st, sixGroups)
		for i := range 5 { // learn the slots
			allow(t, g, request(t, fmt.Sprintf("warm%d@example.com", i), "192.0.2.1"))
		}
		for i := range 20 {
			mu.Lock()
			for _, n := range perNode {
				n.Store(0)
			}
			mu.Unlock()
			allow(t, g, request(t, fmt.Sprintf("u%d@example.com", i), fmt.Sprintf("192.0.2.%d", i)))
			mu.Lock()
			var total int64
			for addr, n := range perNode {
				got := n.Load()
				total += got
				if got > 2 {
					t.Errorf("decision %d: %d round trips to %s, want at most 2 (one per phase)", i, got, addr)
				}
			}
			mu.Unlock()
			// Six groups on three masters: phase 1 is one call, phase 2
			// one pipeline per master; calling the groups one by one
			// would take six.
			if total < 2 || total > 4 {
				t.Errorf("decision %d: %d round trips, want 2 to 4 (one, then one per master)", i, total)
			}
		}
		flush(t, rdb)
	})
}

func TestEveryKeyHasATTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), `
  - {name: fw, action: test, key: [destination], limit: 5, window: 1h}
  - {name: sw, action: test, key: [ip], limit: 5, window: 1h, algorithm: sliding_window}
  - {name: tb, action: test, key: [account], limit: 5, window: 1h, algorithm: token_bucket}
  - {name: sl, action: test, key: [global], limit: 5, window: 1h, algorithm: sliding_log}
  - {name: cc, action: test, key: [ip/56], limit: 5, window: 1h, algorithm: concurrency}
  - {name: ds, action: test, key: [ip/48], of: account, limit: 5, window: 1h, algorithm: distinct}
  - {name: lock, action: test, key: [account, ip], count: failures, limit: 2, window: 1h, lockout: {initial: 1m, factor: 2, max: 1h}}
  - {name: packed-a, action: test, key: [destination, ip], limit: 5, window: 1h}
  - {name: packed-b, action: test, key: [destination, ip], limit: 5, window: 1h, algorithm: token_bucket,
     count: failures, lockout: {initial: 1m, factor: 2, max: 1h}}
`)
		req := request(t, "ttl@example.com", "2001:db8::1")
		for range 3 {
			d := allow(t, g, req)
			if _, err := g.Settle(context.Background(), req, d, guard.Failure); err != nil {
				t.Fatal(err)
			}
		}
		// One key per rule (the lock rule's counter was cleared by its
		// lockout, which has a key of its own), and one packed hash for
		// the two rules keyed on destination and ip. The Cleanup of
		// forEachBackend checks the TTLs of all these keys.
		if n := len(dump(t, rdb)); n != 8 {
			t.Fatalf("%d keys written, want 8: %v", n, dump(t, rdb))
		}
	})
}

func TestKeysHoldNoClearIdentifier(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), threeRules+`
  - {name: per-account, action: test, key: [account], limit: 10, window: 1h}
  - {name: accounts-per-ip, action: test, key: [ip], of: account, limit: 10, window: 1h, algorithm: distinct}
`)
		allow(t, g, request(t, "secret.person@example.com", "198.51.100.77"))
		keys := dump(t, rdb)
		if len(keys) < 4 {
			t.Fatalf("%d keys: the rules wrote less than expected: %v", len(keys), keys)
		}
		for k, v := range keys {
			for _, clear := range []string{"secret", "person", "example", "198.51", "alice"} {
				if strings.Contains(strings.ToLower(k+v), clear) {
					t.Errorf("key %q = %q holds %q", k, v, clear)
				}
			}
			if len(k) > 64 {
				t.Errorf("key %q is %d bytes", k, len(k))
			}
		}
	})
}

// Window edges on a real server, in real time: a short window lets a
// request through again once the reported Retry-After has passed.
func TestWindowEdgesRealTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, alg := range []store.Algorithm{store.FixedWindow, store.SlidingWindow, store.TokenBucket, store.SlidingLog, store.Concurrency} {
			t.Run(string(alg), func(t *testing.T) {
				g := newGuard(t, newStore(rdb), fmt.Sprintf(`  - {name: edge, action: test, key: [destination], limit: 3, window: 400ms, algorithm: %s}`, alg))
				req := request(t, "edge-"+string(alg)+"@example.com", "192.0.2.1")
				for i := range 3 {
					if d := allow(t, g, req); !d.Allowed || d.Rules[0].Remaining != int64(2-i) {
						t.Fatalf("request %d: %+v", i, d)
					}
				}
				d := allow(t, g, req)
				if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 800*time.Millisecond {
					t.Fatalf("4th request: want a denial with 0 < retry ≤ 800ms, got %+v", d)
				}
				time.Sleep(d.RetryAfter + 5*time.Millisecond)
				if d := allow(t, g, req); !d.Allowed {
					t.Fatalf("after Retry-After (%s) still denied: %+v", d.RetryAfter, d)
				}
			})
		}
	})
}

func TestConcurrencyLeasesRelease(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), `  - {name: inflight, action: test, key: [ip], limit: 2, window: 1m, algorithm: concurrency}`)
		req := request(t, "cc@example.com", "192.0.2.1")
		a, b := allow(t, g, req), allow(t, g, req)
		if !a.Allowed || !b.Allowed || a.Lease == "" || a.Lease == b.Lease {
			t.Fatalf("two leases: %+v %+v", a, b)
		}
		if d := allow(t, g, req); d.Allowed {
			t.Fatal("a third lease was granted with limit 2")
		}
		if err := g.Release(context.Background(), req, a.Lease); err != nil {
			t.Fatal(err)
		}
		if d := allow(t, g, req); !d.Allowed {
			t.Fatalf("after a release still denied: %+v", d)
		}
	})
}

func TestStoreErrorPolicies(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	g := newGuard(t, newStore(rdb), `
  - {name: strict, action: otp.send, key: [destination], limit: 5, window: 1m}
  - {name: lenient, action: login, key: [ip], limit: 2, window: 1m}
`)
	ctx := context.Background()
	d, err := g.Allow(ctx, guard.Request{Action: "otp.send", Subject: subject(t, "a@example.com", "192.0.2.1")})
	if err != nil || d.Allowed || d.StoreError == nil {
		t.Fatalf("otp.send with Redis down: want a denial with a store error, got %+v %v", d, err)
	}
	login := guard.Request{Action: "login", Subject: subject(t, "a@example.com", "192.0.2.1")}
	var allowed int
	for range 5 {
		d, err := g.Allow(ctx, login)
		if err != nil || d.StoreError == nil {
			t.Fatalf("login with Redis down: %+v %v", d, err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("the backstop admitted %d logins, want its limit 2", allowed)
	}
}

// fixedClock drives the embedded miniredis clock: the scripts read TIME
// from it, and its keys expire as it advances.
type fixedClock struct {
	srv *localredis.Server
	now time.Time
}

func newFixedClock(t *testing.T) (*fixedClock, *redisstore.Store) {
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c := &fixedClock{srv: srv, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	srv.SetTime(c.now)
	return c, newStore(srv.Client())
}

func (c *fixedClock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	c.srv.SetTime(c.now)
	c.srv.FastForward(d)
}

type step struct {
	at        time.Duration // since t0
	allowed   bool
	remaining int64
	retry     time.Duration // when denied
}

// The algorithms at fixed instants t0…: limit 4 per 10s.
func TestAlgorithmsAtFixedInstants(t *testing.T) {
	s := time.Second
	cases := map[store.Algorithm][]step{
		store.FixedWindow: { // the window starts at the first hit
			{0, true, 3, 0}, {1 * s, true, 2, 0}, {2 * s, true, 1, 0}, {3 * s, true, 0, 0},
			{4 * s, false, 0, 6 * s}, {9 * s, false, 0, 1 * s}, {10 * s, true, 3, 0}, {19 * s, true, 2, 0}, {20 * s, true, 3, 0},
		},
		store.SlidingWindow: { // windows aligned on multiples of 10s; t0 is one
			{0, true, 3, 0}, {1 * s, true, 2, 0}, {2 * s, true, 1, 0}, {3 * s, true, 0, 0},
			{4 * s, false, 0, 6*s + 2500*time.Millisecond}, // next window, once 4×(10-e)/10 ≤ 3
			{12500 * time.Millisecond, true, 0, 0},         // 4×0.75 = 3 of the last window, +1
			{13 * s, false, 0, 2 * s},                      // 1 + ⌈4×0.7⌉ = 4; needs ⌈4×(10-e)/10⌉ ≤ 2, e ≥ 5s
			{15 * s, true, 0, 0},
			{16 * s, false, 0, 1500 * time.Millisecond}, // 2 + ⌈4×0.4⌉ = 4; needs ⌈4×(10-e)/10⌉ ≤ 1, e ≥ 7.5s
			{30 * s, true, 3, 0},
		},
		store.TokenBucket: { // burst 4, one token back every 2.5s
			{0, true, 3, 0}, {0, true, 2, 0}, {0, true, 1, 0}, {0, true, 0, 0},
			{0, false, 0, 2500 * time.Millisecond}, {2 * s, false, 0, 500 * time.Millisecond},
			{2500 * time.Millisecond, true, 0, 0}, {12500 * time.Millisecond, true, 3, 0},
		},
		store.SlidingLog: { // exactly 4 in any 10s
			{0, true, 3, 0}, {1 * s, true, 2, 0}, {2 * s, true, 1, 0}, {3 * s, true, 0, 0},
			{4 * s, false, 0, 6 * s}, {10 * s, true, 0, 0}, {10 * s, false, 0, 1 * s}, {11 * s, true, 0, 0}, {25 * s, true, 3, 0},
		},
		store.Concurrency: { // leases of 10s, never released here
			{0, true, 3, 0}, {1 * s, true, 2, 0}, {2 * s, true, 1, 0}, {3 * s, true, 0, 0},
			{4 * s, false, 0, 6 * s}, {10 * s, true, 0, 0}, {10500 * time.Millisecond, false, 0, 500 * time.Millisecond},
		},
	}
	for alg, steps := range cases {
		t.Run(string(alg), func(t *testing.T) {
			clock, mem := newFixedClock(t)
			g := newGuard(t, mem, fmt.Sprintf(`  - {name: r, action: test, key: [destination], limit: 4, window: 10s, algorithm: %s}`, alg))
			req := request(t, "fixed@example.com", "192.0.2.1")
			var at time.Duration
			for i, st := range steps {
				clock.advance(st.at - at)
				at = st.at
				d := allow(t, g, req)
				r := d.Rules[0]
				if d.Allowed != st.allowed || r.Remaining != st.remaining || (!st.allowed && r.RetryAfter != st.retry) {
					t.Errorf("t%d (+%s): allowed %v remaining %d retry %s; want %v %d %s",
						i, st.at, d.Allowed, r.Remaining, r.RetryAfter, st.allowed, st.remaining, st.retry)
				}
			}
		})
	}
}

func TestProgressiveLockout(t *testing.T) {
	clock, mem := newFixedClock(t)
	g := newGuardAt(t, mem, clock, `  - {name: login, action: login, key: [account, ip], count: failures, limit: 3, window: 15m, resetOnSuccess: true,
      lockout: {initial: 1m, factor: 2, max: 3m}}`)
	req := guard.Request{Action: "login", Subject: subject(t, "x@example.com", "192.0.2.1")}
	ctx := context.Background()
	fail := func() []guard.Result {
		t.Helper()
		d := allow(t, g, req)
		if !d.Allowed {
			t.Fatalf("denied before the lockout: %+v", d)
		}
		res, err := g.Settle(ctx, req, d, guard.Failure)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// The limit's failures, then a lockout; after it, within reset, each
	// first failure locks again at once for the next duration (one try
	// per lockout, not a fresh budget).
	fail()
	fail()
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 3 * time.Minute} {
		res := fail()
		if !res[0].Locked || res[0].RetryAfter != want {
			t.Fatalf("failure %d: want a lockout of %s, got %+v", i, want, res[0])
		}
		d := allow(t, g, req)
		if d.Allowed || !d.Rules[0].Locked || d.RetryAfter != want {
			t.Fatalf("during the lockout: want denied for %s, got %+v", want, d)
		}
		clock.advance(want - time.Second)
		if d := allow(t, g, req); d.Allowed {
			t.Fatalf("1s before the end of the %s lockout: allowed", want)
		}
		clock.advance(time.Second)
	}
	// A success proves the (account, IP) pair (resetOnSuccess): its
	// failures and its lockout history go, and the limit holds again.
	d := allow(t, g, req)
	if !d.Allowed {
		t.Fatalf("after the lockout: %+v", d)
	}
	if _, err := g.Settle(ctx, req, d, guard.Success); err != nil {
		t.Fatal(err)
	}
	fail()
	if res := fail(); res[0].Locked {
		t.Fatalf("the second failure after a success locked: %+v", res[0])
	}
	if res := fail(); !res[0].Locked || res[0].RetryAfter != time.Minute {
		t.Fatalf("the third failure after a success: want the first lockout again, got %+v", res[0])
	}
}

func TestShadowAndSoftModes(t *testing.T) {
	_, mem := newFixedClock(t)
	g := newGuard(t, mem, `
  - {name: shadow, action: test, key: [ip], limit: 2, window: 1m, mode: shadow}
  - {name: soft, action: test, key: [destination], limit: 10, window: 1m, mode: soft, overage: 20%}
`)
	req := request(t, "soft@example.com", "192.0.2.1")
	var got []string
	for i := range 13 {
		d := allow(t, g, req)
		got = append(got, fmt.Sprintf("%d:%v/%v/%v/%v", i, d.Allowed, d.Rules[0].Allowed, d.Rules[1].Over, d.Rules[1].Remaining))
	}
	want := []string{
		"0:true/true/false/9", "1:true/true/false/8", "2:true/false/false/7", "3:true/false/false/6",
		"4:true/false/false/5", "5:true/false/false/4", "6:true/false/false/3", "7:true/false/false/2",
		"8:true/false/false/1", "9:true/false/false/0", "10:true/false/true/0", "11:true/false/true/0",
		"12:false/false/false/0",
	}
	// request 2 is the first the shadow rule would deny, and it is still
	// allowed; the soft rule allows 10 + 20% = 12, the last two over its
	// nominal limit, and denies the 13th.
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if d := allow(t, g, req); d.Allowed || d.DeniedBy != "soft" || d.RetryAfter <= 0 {
		t.Fatalf("the 14th request: want denied by soft, got %+v", d)
	}
}

// Two guards with their own clients agree, whatever their local clocks
// say: all time is the server's. The server's clock is set seven minutes
// behind the local one and only the server's clock moves the windows.
func TestGuardsAgreeWhateverTheirClocks(t *testing.T) {
	clock, mem := newFixedClock(t)
	clock.now = time.Now().Add(-7 * time.Minute)
	clock.srv.SetTime(clock.now)
	rules := `  - {name: r, action: test, key: [destination], limit: 4, window: 1m, algorithm: sliding_log}`
	other := newStore(redis.NewClient(&redis.Options{Addr: clock.srv.Addr()}))
	a, b := newGuard(t, mem, rules), newGuard(t, other, rules)
	req := request(t, "skew@example.com", "192.0.2.1")
	for i, g := range []*guard.Guard{a, b, a, b} {
		if d := allow(t, g, req); !d.Allowed || d.Rules[0].Remaining != int64(3-i) {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	da, db := allow(t, a, req), allow(t, b, req)
	if da.Allowed || db.Allowed || da.RetryAfter != time.Minute || db.RetryAfter != time.Minute {
		t.Fatalf("both guards must deny with the same retry: %+v %+v", da, db)
	}
	clock.advance(time.Minute)
	if d := allow(t, b, req); !d.Allowed {
		t.Fatalf("after a minute of server time: %+v", d)
	}
}

func TestPacerSpacesTurns(t *testing.T) {
	_, mem := newFixedClock(t)
	p, err := pacer.New(mem, "ses", 2, time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var waits []time.Duration
	for range 4 {
		d, err := p.Reserve(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, d)
	}
	want := []time.Duration{0, 0, 500 * time.Millisecond, time.Second}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	if d, err := p.Reserve(ctx, time.Second); err != pacer.ErrWaitTooLong || d != 1500*time.Millisecond {
		t.Fatalf("a turn 1.5s away with maxWait 1s: %s %v", d, err)
	}
	// the refused turn was not booked
	if d, err := p.Reserve(ctx, 2*time.Second); err != nil || d != 1500*time.Millisecond {
		t.Fatalf("next turn: %s %v", d, err)
	}
}

func TestIPv6ClientsShareTheirSlash64(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), `  - {name: ip, action: test, key: [ip], limit: 3, window: 1m}`)
		var allowed int
		for i := range 10 {
			a := netip.MustParseAddr(fmt.Sprintf("2001:db8:1:2:%x::%x", i*4099, i+1))
			req := guard.Request{Action: "test", Subject: guard.Subject{IP: a}}
			if allow(t, g, req).Allowed {
				allowed++
			}
		}
		if allowed != 3 {
			t.Fatalf("10 addresses of one /64 got %d admissions, want 3", allowed)
		}
	})
}

func TestMissingDimensionIsAnError(t *testing.T) {
	_, mem := newFixedClock(t)
	g := newGuard(t, mem, `  - {name: acct, action: test, key: [account], limit: 3, window: 1m}`)
	_, err := g.Allow(context.Background(), guard.Request{Action: "test"})
	if err == nil || !strings.Contains(err.Error(), "no account") {
		t.Fatalf("want an error naming the missing account, got %v", err)
	}
}

func TestNoScriptAfterFlush(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), threeRules)
		allow(t, g, request(t, "a@example.com", "192.0.2.1"))
		ctx := context.Background()
		// A node that restarted empty, or was flushed, has neither the
		// scripts nor the FUNCTION library: the store loads them again
		// (nothing ran, so calling again is safe).
		flushCode := func(n redis.Cmdable) {
			if err := n.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			// (the Serverless double has no FUNCTION command)
			if err := n.FunctionFlush(ctx).Err(); err != nil && !strings.Contains(err.Error(), "unknown command") {
				t.Fatal(err)
			}
		}
		for i, want := range []int64{8, 7} {
			if c, ok := adminOf(rdb).(*redis.ClusterClient); ok {
				_ = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { flushCode(n); return nil })
			} else {
				flushCode(adminOf(rdb))
			}
			if d := allow(t, g, request(t, "a@example.com", "192.0.2.1")); !d.Allowed || d.Rules[0].Remaining != want {
				t.Fatalf("after flush %d: %+v", i, d)
			}
			// where there are functions, the library is loaded again, not
			// left for whole scripts by EVAL from then on
			if libs, err := adminOf(rdb).FunctionList(ctx, redis.FunctionListQuery{}).Result(); err == nil && len(libs) != 1 {
				t.Errorf("after flush %d: %d function libraries loaded, want the library again", i, len(libs))
			}
		}
	})
}

// failNth is a go-redis hook that fails the nth call (command or
// pipeline) counted since the last reset, when armed.
type failNth struct {
	armed atomic.Bool
	n     atomic.Int64
	nth   int64
}

func (h *failNth) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failNth) fail() bool {
	return h.armed.Load() && h.n.Add(1) == h.nth
}

func (h *failNth) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" && cmd.Name() != "client" && h.fail() {
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *failNth) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() != "hello" && h.fail() {
			err := errors.New("injected: connection reset")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestClusterRefund: on a cluster, a request the most selective rule
// admits (phase 1) and another rule denies (phase 2) gives back what
// phase 1 took. A blocked IP hammering a victim's address leaves the
// victim's budget untouched; when the refund itself fails, the denial
// stands (even under onStoreError: allow) and the failure is logged.
func TestClusterRefund(t *testing.T) {
	rules := `
  - {name: per-destination, action: test, key: [destination], limit: 5, window: 1h, onStoreError: allow}
  - {name: per-ip, action: test, key: [ip], limit: 10, window: 1h, onStoreError: allow}
`
	hook := &failNth{nth: 3}
	var logs testutil.Buffer
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1,
		NewClient: func(opt *redis.Options) *redis.Client {
			c := redis.NewClient(opt)
			c.AddHook(hook)
			return c
		}})
	defer rdb.Close()
	st := redisstore.New(rdb, redisstore.Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	g := newGuard(t, st, rules)
	ctx := context.Background()
	// Block the attacker's IP: 10 sends to 10 other addresses.
	for i := range 10 {
		allow(t, g, request(t, fmt.Sprintf("other%d@example.com", i), "203.0.113.66"))
	}
	attack := request(t, "victim@example.com", "203.0.113.66")
	for range 20 {
		if d := allow(t, g, attack); d.Allowed || d.DeniedBy != "per-ip" {
			t.Fatalf("the blocked IP got %+v", d)
		}
	}
	// The victim's budget is whole: 5 sends from their own IP.
	victim := request(t, "victim@example.com", "198.51.100.5")
	st2, err := g.Status(ctx, "destination", victim.Subject)
	if err != nil {
		t.Fatal(err)
	}
	if len(st2) == 0 || st2[0].Remaining != 5 {
		t.Fatalf("after 20 refused attacks, the victim's per-destination status is %+v, want 5 remaining", st2)
	}

	// Now the refund fails: call 1 is phase 1 (destination), call 2 phase
	// 2 (ip, denies), call 3 the refund.
	hook.n.Store(0)
	hook.armed.Store(true)
	d, err := g.Allow(ctx, attack)
	hook.armed.Store(false)
	if err != nil || d.Allowed || d.StoreError != nil || d.DeniedBy != "per-ip" {
		t.Fatalf("with the refund failing: %+v, %v; want the per-ip denial to stand", d, err)
	}
	if hook.n.Load() < 3 {
		t.Fatalf("only %d calls: no refund was attempted", hook.n.Load())
	}
	if !strings.Contains(logs.String(), "refund after a cluster denial failed") {
		t.Errorf("the failed refund is not logged: %q", logs.String())
	}
	// The unit stays taken (errs towards denying): 4 left.
	st2, err = g.Status(ctx, "destination", victim.Subject)
	if err != nil || len(st2) == 0 || st2[0].Remaining != 4 {
		t.Fatalf("after the failed refund: %+v, %v; want 4 remaining", st2, err)
	}
	flush(t, rdb)
}

// TestRealRedisRunsTheFunctionLibrary: a Redis 7 server runs the library
// as FUNCTIONs (built once per node), not as per-call EVALSHA scripts.
func TestRealRedisRunsTheFunctionLibrary(t *testing.T) {
	rdb := single.Client()
	defer rdb.Close()
	st := newStore(rdb)
	if err := st.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !st.Functions() {
		t.Fatal("redis-server 7 runs the library as scripts")
	}
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, st, threeRules)
	allow(t, g, request(t, "fn@example.com", "192.0.2.1"))
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "cmdstat_fcall:") || strings.Contains(info, "cmdstat_evalsha:") {
		t.Errorf("the decision did not FCALL: %s", info)
	}
	flush(t, rdb)
}
