// Package faults puts otpguard's store behind network faults (an
// in-process toxiproxy in front of a real redis-server) and behind a
// cluster node that loses replies, and prints, per fault, the answers,
// their latency and what was admitted over the fault and after it.
package faults

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

var (
	single  *redistest.Server
	cluster *redistest.Cluster
)

// quiet drops go-redis's own log lines (a dead master is dialed again and
// again during a failover: the figures are what this package prints).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	zerolog.SetGlobalLevel(zerolog.Disabled) // toxiproxy's own logs
	redis.SetLogger(quiet{})
	os.Exit(func() int {
		var err error
		if single, err = redistest.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer single.Close()
		if cluster, err = redistest.StartCluster(3); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cluster.Close()
		return m.Run()
	}())
}

const (
	timeout = 50 * time.Millisecond // store.timeout
	limit   = 10
)

func newGuard(t *testing.T, rdb redisstore.Client) *guard.Guard {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`store: {timeout: %s, denyCache: {ttl: 0s}}
rules:
  - {name: per-destination, action: test, key: [destination], limit: %d, window: 1h}
`, timeout, limit)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), redisstore.New(rdb, redisstore.Options{}), guard.Options{Secret: []byte("faults-secret-0123456789"), Backstop: memstore.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func request(t *testing.T, email string) guard.Request {
	d, err := identity.ParseEmail(email)
	if err != nil {
		t.Fatal(err)
	}
	return guard.Request{Action: "test", Subject: guard.Subject{Destination: d}}
}

func newProxy(t *testing.T, upstream string) *toxiproxy.Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	p := toxiproxy.NewProxy(srv, "redis", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// outcome tallies the answers to decisions.
type outcome struct {
	allowed, denied, storeErr int
	max                       time.Duration
}

func decide(ctx context.Context, g *guard.Guard, req guard.Request, n int) outcome {
	var o outcome
	for range n {
		t0 := time.Now()
		d, err := g.Allow(ctx, req)
		o.max = max(o.max, time.Since(t0))
		switch {
		case err != nil || d.StoreError != nil:
			o.storeErr++
		case d.Allowed:
			o.allowed++
		default:
			o.denied++
		}
	}
	return o
}

// TestNetworkFaults: each fault between the guard and a single
// redis-server, 5 decisions during it (1 for the lost reply) for one subject (limit 10), then
// decisions after it until denied. A rule with onStoreError: deny answers
// a store error as 503.
func TestNetworkFaults(t *testing.T) {
	ctx := context.Background()
	direct := single.Client()
	defer direct.Close()
	type fault struct {
		name   string
		toxics []string // toxiproxy toxic JSON
		// during: what the 5 decisions during the fault must be answered.
		allowedDuring bool
	}
	faults := []fault{
		{"latency 20ms (< store.timeout)", []string{`{"type":"latency","stream":"downstream","attributes":{"latency":20}}`}, true},
		{"latency 200ms (> store.timeout)", []string{`{"type":"latency","stream":"downstream","attributes":{"latency":200}}`}, false},
		{"blackhole", []string{`{"type":"timeout","stream":"upstream","attributes":{"timeout":0}}`}, false},
		{"connection reset", []string{`{"type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`}, false},
		{"reply lost after the script ran", []string{`{"type":"limit_data","stream":"downstream","attributes":{"bytes":0}}`}, false},
		{"slow close 500ms", []string{`{"type":"slow_close","stream":"downstream","attributes":{"delay":500}}`}, true},
		{"bandwidth 1 KB/s", []string{`{"type":"bandwidth","stream":"downstream","attributes":{"rate":1}}`}, false},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-34s %-9s %-9s %-11s %-11s %-14s %-14s\n", "fault (store.timeout 50ms)", "allowed", "503", "max latency", "consumed", "admitted after", "admitted total")
	for i, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			p := newProxy(t, single.Addr)
			rdb, err := redisstore.NewClient("redis://" + p.Listen)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			g := newGuard(t, rdb)
			req := request(t, fmt.Sprintf("fault%d@example.com", i))
			// Warm: the library is loaded, one connection is open.
			if o := decide(ctx, g, req, 1); o.allowed != 1 {
				t.Fatalf("before the fault: %+v", o)
			}
			for k, tx := range f.toxics {
				if _, err := p.Toxics.AddToxicJson(strings.NewReader(strings.Replace(tx, `{"type"`, fmt.Sprintf(`{"name":"t%d","type"`, k), 1))); err != nil {
					t.Fatal(err)
				}
			}
			n := 5
			if f.name == "reply lost after the script ran" {
				n = 1 // one decision: exactly one unit must be consumed
			}
			during := decide(ctx, g, req, n)
			p.Toxics.ResetToxics(ctx)
			// What Redis counted (through a direct connection).
			st, err := newGuard(t, direct).Status(ctx, "destination", req.Subject)
			if err != nil {
				t.Fatal(err)
			}
			consumed := limit - st[0].Remaining
			var after outcome
			for range 3 * limit {
				o := decide(ctx, g, req, 1)
				after.allowed += o.allowed
				after.storeErr += o.storeErr
				if o.denied > 0 {
					break
				}
			}
			total := 1 + during.allowed + after.allowed
			fmt.Fprintf(&table, "%-34s %-9d %-9d %-11s %-11d %-14d %-14d\n", f.name, during.allowed, during.storeErr,
				during.max.Round(time.Millisecond), consumed, after.allowed, total)
			if f.allowedDuring && during.allowed != n {
				t.Errorf("during: %+v, want every decision answered", during)
			}
			if !f.allowedDuring && during.allowed == n {
				t.Errorf("during: %+v, the fault changed nothing", during)
			}
			// Bounded answers: store.timeout, plus scheduling slack on a
			// shared 2-core machine (the slow close only delays closing).
			if bound := timeout + 150*time.Millisecond; during.max > bound {
				t.Errorf("an answer took %s, over %s", during.max, bound)
			}
			if total > limit {
				t.Errorf("admitted %d in all, over the limit of %d", total, limit)
			}
			if after.storeErr > 1 {
				t.Errorf("after the fault %d store errors: the client does not recover", after.storeErr)
			}
			if f.name == "reply lost after the script ran" && (during.storeErr != 1 || consumed != 2) {
				t.Errorf("a decision whose reply was lost: %+v, consumed %d with the warm-up's, want a store error and 2 (it ran once, was not retried)",
					during, consumed)
			}
		})
	}
	t.Log(table.String())
}

// loseReply is a node hook that, when armed, lets a command run on the
// node and then reports the connection lost, as a reset after the reply
// left Redis would; it counts the commands that reach the node.
type loseReply struct {
	armed atomic.Bool
	ran   atomic.Int64
}

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if strings.HasPrefix(cmd.Name(), "fcall") || strings.HasPrefix(cmd.Name(), "evalsha") {
			h.ran.Add(1)
			if h.armed.Load() {
				cmd.SetErr(io.EOF)
				return io.EOF
			}
		}
		return err
	}
}

func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.ran.Add(int64(len(cmds)))
		if h.armed.Load() {
			for _, c := range cmds {
				c.SetErr(io.EOF)
			}
			return io.EOF
		}
		return err
	}
}

// TestClusterNeverRetriesALostReply: on the cluster client otpguard
// builds (redisstore.NewClient), a script whose reply is lost (EOF after
// it ran) is not sent again, to the same node or another: exactly one
// unit is consumed.
func TestClusterNeverRetriesALostReply(t *testing.T) {
	rdb, err := redisstore.NewClient(strings.Join(cluster.Addrs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cc := rdb.(*redis.ClusterClient)
	hook := &loseReply{}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
	g := newGuard(t, rdb)
	ctx := context.Background()
	req := request(t, "lost-reply@example.com")
	if o := decide(ctx, g, req, 1); o.allowed != 1 {
		t.Fatalf("warm-up: %+v", o)
	}
	hook.ran.Store(0)
	hook.armed.Store(true)
	d, err := g.Allow(ctx, req)
	hook.armed.Store(false)
	if err == nil && d.StoreError == nil {
		t.Fatalf("a lost reply was answered: %+v", d)
	}
	if n := hook.ran.Load(); n != 1 {
		t.Errorf("the script ran %d times for one decision whose reply was lost, want 1 (the client retried)", n)
	}
	st, err := g.Status(ctx, "destination", req.Subject)
	if err != nil {
		t.Fatal(err)
	}
	if consumed := limit - st[0].Remaining; consumed != 2 {
		t.Errorf("consumed %d (warm-up and the lost reply), want 2", consumed)
	}
}
