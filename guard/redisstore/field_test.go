package redisstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/pacer"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// The Redis users meet in the field: ElastiCache as the stack creates it.

const templatePath = "../../template.yaml"

// everyRule has a rule of every algorithm, with and without packing, a
// lockout on a packed and on an unpacked rule, and a failure-counted
// distinct rule: a decision, its settlement, a release, a status and an
// unblock touch every command the library sends.
const everyRule = `
  - {name: fw, action: all, key: [destination], limit: 5, window: 1m}
  - {name: fw-day, action: all, key: [destination], limit: 50, window: 24h}
  - {name: tb, action: all, key: [ip], limit: 50, window: 1h, algorithm: token_bucket}
  - {name: sw, action: all, key: [ip], limit: 50, window: 1h, algorithm: sliding_window, count: failures,
     lockout: {initial: 1m, factor: 2, max: 1h}}
  - {name: sl, action: all, key: [account], limit: 50, window: 1h, algorithm: sliding_log}
  - {name: cc, action: all, key: [global], limit: 50, window: 1m, algorithm: concurrency}
  - {name: ds, action: all, key: [ip], of: account, limit: 50, window: 1h, algorithm: distinct, count: failures}
  - {name: lock, action: all, key: [account, ip], limit: 2, window: 15m, count: failures, resetOnSuccess: true,
     lockout: {initial: 1m, factor: 2, max: 1h}}
  - {name: rt, action: all, key: [ip/24], algorithm: ratio, limit: 80%, min: 3, window: 1h}
  - {name: el, action: all, key: [ip/16], algorithm: sliding_window, count: failures, limit: 5, window: 1h, elastic: {ratio: 20%}}
  - {name: dv, action: all, key: [account, device], limit: 50, window: 1h, when: {device: untrusted}}
`

// exercise runs every entry of the library and every op kind on rdb, as
// the functions do, and fails on any error. lost, when set, runs after
// the library is loaded: a server that then loses it.
func exercise(t *testing.T, rdb redis.UniversalClient, conn *redisstore.Conn, lost func()) {
	t.Helper()
	ctx := context.Background()
	if conn == nil {
		conn = redisstore.Connect(rdb)
	}
	st := redisstore.New(conn, redisstore.Options{})
	if err := st.Preload(ctx); err != nil {
		t.Logf("preload: %v (the store then loads on first use, or EVALs)", err)
	}
	if lost != nil {
		lost()
	}
	g := newGuard(t, st, everyRule)
	req := guard.Request{Action: "all", Subject: subject(t, "acl@example.com", "192.0.2.44")}
	for i, o := range []guard.Outcome{guard.Failure, guard.Failure, guard.Success, guard.Void, guard.Failure, guard.Failure} {
		d := allow(t, g, req)
		if _, err := g.Settle(ctx, req, d, o); err != nil {
			t.Fatalf("settle %d: %v", i, err)
		}
		if err := g.SettleReceipt(ctx, g.Receipt(d), guard.Success); err != nil {
			t.Fatalf("settle a receipt %d: %v", i, err)
		}
		tok, err := g.DeviceToken(req.Subject.Account, "", d.At)
		if err != nil {
			t.Fatal(err)
		}
		req.Device = tok
		if err := g.Release(ctx, req, d.Lease); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if err := g.RevokeDevices(ctx, req.Subject.Account); err != nil {
		t.Fatalf("revoke devices: %v", err)
	}
	for _, dim := range []string{"destination", "ip", "account"} {
		if _, err := g.Status(ctx, dim, req.Subject); err != nil {
			t.Fatalf("status %s: %v", dim, err)
		}
		if _, err := g.Unblock(ctx, dim, req.Subject); err != nil {
			t.Fatalf("unblock %s: %v", dim, err)
		}
	}
	p, err := pacer.New(st, "acl-pacer", 10, time.Second, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reserve(ctx, time.Second); err != nil {
		t.Fatalf("pacer: %v", err)
	}
	cfg := config.Default()
	cfg.Store.Timeout = 10 * time.Second // not about latency: room for a loaded machine (50ms timed out beside a make test)
	codes, err := otp.New(cfg, redisstore.NewCodes(conn), secret)
	if err != nil {
		t.Fatal(err)
	}
	const receipt = "sms-per-prefix,AAAAAAAAAAAAAAAAAAAAAA,1893456000000000,1"
	issued, err := codes.Issue(ctx, req.Subject.Destination, "login", receipt)
	code := issued.Code
	if err != nil {
		t.Fatalf("issue a code: %v", err)
	}
	if v, err := codes.Verify(ctx, req.Subject.Destination, "login", code); err != nil || v.Check != otp.Approved || v.Receipt != receipt {
		t.Fatalf("verify the code: %+v, %v", v, err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping (the health check): %v", err)
	}
}

// aclUser creates, on a plain redis-server, the user the functions log in
// as, with template.yaml's access string as it is, and returns its
// client and a way to read the ACL log of its refusals.
func aclUser(t *testing.T, access string) (redis.UniversalClient, func() []string) {
	t.Helper()
	ctx := context.Background()
	admin := single.Client()
	t.Cleanup(func() { admin.Close() })
	args := []any{"acl", "setuser", "otpguard", "reset", ">acl-test-password"}
	for _, f := range strings.Fields(access) {
		args = append(args, f)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("the access string is refused by redis-server: %v", err)
	}
	if err := admin.Do(ctx, "acl", "log", "reset").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(ctx, "acl", "deluser", "otpguard"); flush(t, admin) })
	rdb, err := redisstore.NewClient("redis://otpguard:acl-test-password@" + single.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb, func() []string {
		entries, err := admin.ACLLog(ctx, 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			if e.Username == "otpguard" {
				out = append(out, e.Reason+":"+e.Object)
			}
		}
		return out
	}
}

// TestTheStackCacheUserRunsTheLibrary: the user template.yaml creates for
// the functions may run every command the library sends, and the ACL log
// holds no refusal. (On the template of the previous round it failed:
// TIME was not in its access string, and every call was refused: every
// decision would have been a 503.)
func TestTheStackCacheUserRunsTheLibrary(t *testing.T) {
	access, err := redistest.TemplateAccessString(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	rdb, denials := aclUser(t, access)
	exercise(t, rdb, nil, nil)
	// The store asks once whether the server runs a FUNCTION library
	// (faster where it can), and runs scripts when refused. ElastiCache
	// Serverless has no FUNCTION command at all (no ACL refusal there: see
	// TestServerlessRunsTheLibrary); this redis-server has one, and the
	// stack's user may not load into it. Nothing else is refused.
	var other []string
	loads := 0
	for _, d := range denials() {
		if d == "command:function|load" {
			loads++
		} else {
			other = append(other, d)
		}
	}
	if len(other) > 0 || loads > 1 {
		t.Errorf("the cache user was refused: %v, and FUNCTION LOAD %d times", other, loads)
	}
}

// TestTheStackCacheUserMayDoNothingDangerous: nothing that empties,
// reconfigures or disconnects the cache, and no key outside og:*.
func TestTheStackCacheUserMayDoNothingDangerous(t *testing.T) {
	access, err := redistest.TemplateAccessString(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin := single.Client()
	defer admin.Close()
	args := []any{"acl", "setuser", "otpguard-dry", "reset", ">x"}
	for _, f := range strings.Fields(access) {
		args = append(args, f)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(ctx, "acl", "deluser", "otpguard-dry")
	// ACL DRYRUN answers OK, or a sentence saying why not.
	dry := func(cmd ...any) error {
		v, err := admin.Do(ctx, append([]any{"acl", "dryrun", "otpguard-dry"}, cmd...)...).Text()
		if err == nil && v != "OK" {
			err = fmt.Errorf("%s", v)
		}
		return err
	}
	for _, cmd := range [][]any{
		{"flushall"}, {"flushdb"}, {"client", "kill", "id", "1"}, {"config", "set", "maxmemory", "1"}, {"config", "get", "requirepass"},
		{"keys", "*"}, {"script", "flush"}, {"function", "flush"}, {"debug", "sleep", "0"}, {"shutdown"}, {"acl", "list"},
		{"monitor"}, {"set", "not-ours", "1"}, {"get", "not-ours"}, {"eval", "return 1", "1", "not-ours"}, {"migrate", "h", "1", "k", "0", "1"},
	} {
		if err := dry(cmd...); err == nil {
			t.Errorf("the cache user may run %v", cmd)
		}
	}
	for _, cmd := range [][]any{{"time"}, {"ping"}, {"evalsha", "0000000000000000000000000000000000000000", "1", "og:{x}a"}, {"eval", "return 1", "1", "og:{x}a"}} {
		if err := dry(cmd...); err != nil {
			t.Errorf("the cache user may not run %v: %v", cmd, err)
		}
	}
}

// serverless starts the ElastiCache Serverless double with the template's
// access string.
func serverless(t *testing.T, o redistest.ServerlessOptions) *redistest.Serverless {
	t.Helper()
	access, err := redistest.TemplateAccessString(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	o.AccessString = access
	s, err := redistest.StartServerless(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestServerlessRunsTheLibrary: on the double of ElastiCache Serverless
// (no FUNCTION, TIME refused in scripts, NOSCRIPT now and then, a replica
// on a port that never answers, the template's user), through the client
// the functions build from REDIS_URL: every entry runs, the replica is
// never dialed, nothing is refused, and the store passes the clock.
func TestServerlessRunsTheLibrary(t *testing.T) {
	s := serverless(t, redistest.ServerlessOptions{NoScriptEvery: 5})
	rdb, err := redisstore.NewClient(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	admin := s.Admin()
	defer admin.Close()
	// the stores of one connection share what they learn of the server
	conn := redisstore.Connect(rdb)
	for range 3 {
		// The node behind the endpoint forgets every script once loaded:
		// the store sends them whole (EVAL), as it does on any NOSCRIPT.
		exercise(t, rdb, conn, func() {
			if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// the bound is half the clock's round trip: a second allows for a
	// machine busy with other suites (the bound's own test is
	// TestTheClockFollowsTheServerWithinItsBound)
	st := redisstore.New(conn, redisstore.Options{})
	if passed, bound := st.Clock(); !passed || bound <= 0 || bound > time.Second {
		t.Errorf("clock: passed %v, bound %s; want the time passed in, within a second", passed, bound)
	}
	if n := s.ReplicaConnections(); n != 0 {
		t.Errorf("the replica was dialed %d times", n)
	}
	if s.NoScripts() == 0 {
		t.Error("the double never answered NOSCRIPT: the EVAL fallback was not exercised")
	}
	if d, err := s.Denials(context.Background()); err != nil || len(d) > 0 {
		t.Errorf("the cache user was refused: %v %v", d, err)
	}
}

// TestTheClockFollowsTheServerWithinItsBound: where scripts may not read
// TIME, the time the store passes is the server's (here an hour ahead of
// this process), within the bound it reports, even when the clock's round
// trip is slow.
func TestTheClockFollowsTheServerWithinItsBound(t *testing.T) {
	const skew = time.Hour
	for _, delay := range []time.Duration{0, 40 * time.Millisecond} {
		t.Run(fmt.Sprint("delay ", delay), func(t *testing.T) {
			s := serverless(t, redistest.ServerlessOptions{Skew: skew, TimeDelay: delay})
			rdb, err := redisstore.NewClient(s.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			st := redisstore.New(rdb, redisstore.Options{})
			g := newGuard(t, st, `  - {name: r, action: test, key: [destination], limit: 1000, window: 1h}`)
			req := request(t, "clock@example.com", "192.0.2.9")
			for i := range 20 {
				before := time.Now()
				d := allow(t, g, req)
				after := time.Now()
				_, bound := st.Clock()
				// The server's true time lies in [before, after] + skew.
				lo, hi := before.Add(skew-bound), after.Add(skew+bound)
				if d.At.Before(lo) || d.At.After(hi) {
					t.Fatalf("decision %d: the store's time %s is outside [%s, %s] (bound %s)", i, d.At.Format(time.StampMicro),
						lo.Format(time.StampMicro), hi.Format(time.StampMicro), bound)
				}
				if delay > 0 && bound < delay/2 {
					t.Fatalf("bound %s under half the clock's round trip (%s)", bound, delay)
				}
			}
		})
	}
}

// TestAClusterClientNeverDialsAReplica: a 3+3 cluster whose replicas
// announce a port that never answers (as ElastiCache Serverless's 6380
// behind its security group): decisions, a cluster state reload and the
// library's (re)loading never dial one.
func TestAClusterClientNeverDialsAReplica(t *testing.T) {
	s := serverless(t, redistest.ServerlessOptions{NoScriptEvery: 2})
	rdb, err := redisstore.NewClient(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	st := redisstore.New(rdb, redisstore.Options{})
	g := newGuard(t, st, threeRules)
	ctx := context.Background()
	for i := range 50 {
		allow(t, g, request(t, fmt.Sprintf("r%d@example.com", i), "192.0.2.1"))
		if i%10 == 0 {
			rdb.(*redis.ClusterClient).ReloadState(ctx)
		}
	}
	if err := st.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.ReplicaConnections(); n != 0 {
		t.Errorf("the replica was dialed %d times", n)
	}
	u, _ := url.Parse(s.URL())
	if u.Query().Get("cluster") != "true" {
		t.Fatal("the double's URL is not a cluster endpoint")
	}
}
