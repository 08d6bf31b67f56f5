// Command bench compares, in one run against one local redis-server, a
// decision of three rules (destination, IP, global) made by otpguard (one
// script call) with the same three limits checked by go-redis/redis_rate
// (one Allow per rule), at concurrency 1 and 32. It prints decisions per
// second, p50/p99 latency and Redis round trips per decision.
//
//	go run . [-duration 3s] [-rounds 3]
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/redistest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// The three limits, high enough that every decision is allowed: the
// benchmark measures the cost of deciding, not of denying.
const rules = `
store: {timeout: 5s}
rules:
  - {name: per-destination, action: bench, key: [destination], limit: 1000000000, window: 1h, algorithm: token_bucket}
  - {name: per-ip, action: bench, key: [ip], limit: 1000000000, window: 1h, algorithm: token_bucket}
  - {name: global, action: bench, key: [global], limit: 1000000000, window: 1h, algorithm: token_bucket}
`

type decider func(ctx context.Context, i int) error

func run() error {
	duration := flag.Duration("duration", 3*time.Second, "how long each measurement runs")
	rounds := flag.Int("rounds", 3, "measurements of each case; the median round is reported")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the benchmark process to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	srv, err := redistest.Start()
	if err != nil {
		return err
	}
	defer srv.Close()

	var trips atomic.Int64
	newClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, ContextTimeoutEnabled: true})
		c.AddHook(redistest.RoundTrips{N: &trips})
		return c
	}
	ctx := context.Background()

	// otpguard
	gc := newClient()
	defer gc.Close()
	cfg, err := guard.ParseConfig([]byte(rules))
	if err != nil {
		return err
	}
	st := redisstore.New(gc)
	if err := st.Preload(ctx); err != nil {
		return err
	}
	g, err := guard.New(cfg, st, guard.Options{Secret: []byte("bench-secret-0123456789")})
	if err != nil {
		return err
	}
	const subjects = 10000
	reqs := make([]guard.Request, subjects)
	for i := range reqs {
		d, err := guard.ParseEmail(fmt.Sprintf("user%d@example.com", i))
		if err != nil {
			return err
		}
		ip, _ := guard.ParseIP(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
		reqs[i] = guard.Request{Action: "bench", Subject: guard.Subject{Destination: d, IP: ip}}
	}
	otpguard := func(ctx context.Context, i int) error {
		d, err := g.Allow(ctx, reqs[i%subjects])
		if err == nil && !d.Allowed {
			err = fmt.Errorf("denied: %+v", d)
		}
		return err
	}

	// redis_rate, one Allow per rule
	rc := newClient()
	defer rc.Close()
	lim := redis_rate.NewLimiter(rc)
	limit := redis_rate.Limit{Rate: 1000000000, Burst: 1000000000, Period: time.Hour}
	redisRate := func(ctx context.Context, i int) error {
		n := i % subjects
		for _, key := range []string{fmt.Sprintf("dest:user%d@example.com", n), fmt.Sprintf("ip:10.%d.%d.%d", n>>16&255, n>>8&255, n&255), "global"} {
			r, err := lim.Allow(ctx, key, limit)
			if err != nil {
				return err
			}
			if r.Allowed == 0 {
				return fmt.Errorf("denied")
			}
		}
		return nil
	}

	type result struct {
		perSec     float64
		p50, p99   time.Duration
		tripsPerOp float64
		serverUS   float64 // redis-server CPU per decision, from INFO commandstats
	}
	measure := func(f decider, conc int) (result, error) {
		// warm up: connections and scripts
		if _, _, err := load(ctx, f, conc, 300*time.Millisecond); err != nil {
			return result{}, err
		}
		trips.Store(0)
		if err := gc.ConfigResetStat(ctx).Err(); err != nil {
			return result{}, err
		}
		lat, elapsed, err := load(ctx, f, conc, *duration)
		if err != nil {
			return result{}, err
		}
		usec, err := serverMicros(ctx, gc)
		if err != nil {
			return result{}, err
		}
		slices.Sort(lat)
		return result{
			perSec:     float64(len(lat)) / elapsed.Seconds(),
			p50:        lat[len(lat)/2],
			p99:        lat[len(lat)*99/100],
			tripsPerOp: float64(trips.Load()) / float64(len(lat)),
			serverUS:   usec / float64(len(lat)),
		}, nil
	}

	fmt.Printf("one decision = 3 rules (destination, IP, global); redis-server %s on loopback; %d rounds of %s, median round shown\n\n",
		redisVersion(ctx, gc), *rounds, *duration)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "concurrency\timplementation\tdecisions/s\tp50\tp99\tround trips/decision\tredis-server µs/decision\tthroughput vs redis_rate\t")
	for _, conc := range []int{1, 32} {
		var ours, theirs []result
		for range *rounds { // interleaved, so both see the same machine load
			a, err := measure(otpguard, conc)
			if err != nil {
				return fmt.Errorf("otpguard: %w", err)
			}
			b, err := measure(redisRate, conc)
			if err != nil {
				return fmt.Errorf("redis_rate: %w", err)
			}
			ours, theirs = append(ours, a), append(theirs, b)
		}
		median := func(rs []result) result {
			sort.Slice(rs, func(i, j int) bool { return rs[i].perSec < rs[j].perSec })
			return rs[len(rs)/2]
		}
		a, b := median(ours), median(theirs)
		for _, row := range []struct {
			name  string
			r     result
			ratio float64
		}{{"otpguard", a, a.perSec / b.perSec}, {"redis_rate ×3", b, 1}} {
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%.2f\t%.1f\t%.2f×\t\n", conc, row.name, row.r.perSec,
				row.r.p50.Round(time.Microsecond), row.r.p99.Round(time.Microsecond), row.r.tripsPerOp, row.r.serverUS, row.ratio)
		}
	}
	return tw.Flush()
}

// load runs f from conc goroutines for d and returns every latency.
func load(ctx context.Context, f decider, conc int, d time.Duration) ([]time.Duration, time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range conc {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 4096)
			i := rand.IntN(1 << 20)
			for n := 0; time.Now().Before(deadline); n++ {
				t0 := time.Now()
				if err := f(ctx, i+n*conc+w); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, time.Since(start), firstErr
}

// serverMicros is the CPU time redis-server spent in commands since the
// last CONFIG RESETSTAT.
func serverMicros(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.InfoMap(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for name, v := range info["Commandstats"] {
		if name == "cmdstat_config" || name == "cmdstat_info" {
			continue
		}
		var calls, usec float64
		if _, err := fmt.Sscanf(v, "calls=%g,usec=%g", &calls, &usec); err == nil {
			total += usec
		}
	}
	return total, nil
}

func redisVersion(ctx context.Context, c *redis.Client) string {
	info, err := c.InfoMap(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	return info["Server"]["redis_version"]
}
