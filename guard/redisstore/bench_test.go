package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// BenchmarkAllow is one decision of three rules on the real redis-server,
// from one goroutine: its allocations per decision (-benchmem) are the
// client's cost; ns/op includes the round trip.
func BenchmarkAllow(b *testing.B) {
	rdb := single.Client()
	defer rdb.Close()
	for _, tc := range []struct{ name, store string }{{"allowed", "{timeout: 2s}"}, {"denied-cached", "{timeout: 2s, denyCache: {ttl: 2s, size: 1000}}"}} {
		b.Run(tc.name, func(b *testing.B) {
			limit := "1000000000"
			if tc.name != "allowed" {
				limit = "1"
			}
			g := guardWith(b, rdb, tc.store, benchRules(limit))
			reqs := benchRequests(b, "u", 1, 1000)
			ctx := context.Background()
			for i := range reqs {
				if _, err := g.Allow(ctx, reqs[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := g.Allow(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		if tc.name == "denied-cached" {
			// the attacker's repeats from every core at once (-cpu 1,2,32):
			// the cache's read path takes a read lock only
			b.Run(tc.name+"-parallel", func(b *testing.B) {
				g := guardWith(b, rdb, tc.store, `
  - {name: per-destination, action: bench, key: [destination], limit: 1, window: 1h}
`)
				reqs := benchRequests(b, "p", 2, 1000)
				ctx := context.Background()
				for i := range reqs {
					for range 2 {
						if _, err := g.Allow(ctx, reqs[i]); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for i := 0; pb.Next(); i++ {
						if d, err := g.Allow(ctx, reqs[i%len(reqs)]); err != nil || d.Allowed {
							b.Fatal(err, d.Allowed)
						}
					}
				})
			})
		}
	}
	flush(b, rdb)
}

// BenchmarkAllowConcurrent is the allowed decision of three rules from
// many goroutines at once (-cpu 32, 128: RunParallel's goroutines), each
// on its own client address and destination, with each call on its own
// (lone) and with the calls that arrive together coalesced into one
// pipeline (Options.Coalesce): one run, side by side. cpu-µs/op is this
// process's CPU per decision (the client's work, getrusage), which a busy
// machine inflates less than the wall time.
func BenchmarkAllowConcurrent(b *testing.B) {
	rules := benchRules("1000000000")
	reqs := benchRequests(b, "c", 3, 4096)
	for _, lanes := range []int{0, 2} {
		name := "lone"
		if lanes > 0 {
			name = fmt.Sprintf("coalesced-%d-lanes", lanes)
		}
		b.Run(name, func(b *testing.B) {
			rdb := single.Client()
			defer rdb.Close()
			cfg, err := config.Parse([]byte("store: {timeout: 2s}\nrules:\n" + rules))
			if err != nil {
				b.Fatal(err)
			}
			g, err := guard.New(cfg.Engine(), redisstore.New(rdb, redisstore.Options{Coalesce: lanes}), guard.Options{Secret: secret})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			cpu0 := testutil.CPUTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, err := g.Allow(ctx, reqs[next.Add(1)%int64(len(reqs))]); err != nil || !d.Allowed {
						b.Fatal(err, d.DeniedBy)
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(testutil.CPUTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}

// benchRules are the benchmarks' rules: per destination (limit), per IP
// and global.
func benchRules(limit string) string {
	return `
  - {name: per-destination, action: bench, key: [destination], limit: ` + limit + `, window: 1h}
  - {name: per-ip, action: bench, key: [ip], limit: 1000000000, window: 1h}
  - {name: global, action: bench, key: [global], limit: 1000000000, window: 1h}
`
}

// benchRequests are n requests of the bench action, each from its own
// address <prefix><i>@example.com and IP in 10.<net>.0.0/16.
func benchRequests(b testing.TB, prefix string, net, n int) []guard.Request {
	reqs := make([]guard.Request, n)
	for i := range reqs {
		reqs[i] = request(b, fmt.Sprintf("%s%d@example.com", prefix, i), fmt.Sprintf("10.%d.%d.%d", net, i/256, i%256))
		reqs[i].Action = "bench"
	}
	return reqs
}
