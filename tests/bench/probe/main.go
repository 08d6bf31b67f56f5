package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6399", "")
	conc := flag.Int("c", 32, "")
	dur := flag.Duration("d", 3*time.Second, "")
	rawMode := flag.Bool("raw", false, "")
	flag.Parse()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 64})
	rdb.FlushAll(ctx)
	rdb.FunctionFlush(ctx)
	cfg, err := guard.ParseConfig([]byte(`
store: {timeout: 5s}
rules:
  - {name: per-destination, action: bench, key: [destination], limit: 1000000000, window: 1h}
  - {name: per-ip, action: bench, key: [ip], limit: 1000000000, window: 1h}
  - {name: global, action: bench, key: [global], limit: 1000000000, window: 1h}
`))
	if err != nil {
		panic(err)
	}
	st := redisstore.New(rdb, redisstore.Options{})
	if err := st.Preload(ctx); err != nil {
		panic(err)
	}
	g, err := guard.New(cfg, st, guard.Options{Secret: []byte("0123456789abcdef0123456789abcdef"), Backstop: memstore.New(nil)})
	if err != nil {
		panic(err)
	}
	reqs := make([]guard.Request, 100000)
	for i := range reqs {
		d, _ := guard.ParseEmail(fmt.Sprintf("user%d@example.com", i))
		ip, _ := guard.ParseIP(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
		reqs[i] = guard.Request{Action: "bench", Subject: guard.Subject{Destination: d, IP: ip}}
	}
	for i := range 20000 {
		g.Allow(ctx, reqs[i%len(reqs)])
	}
	rdb.ConfigResetStat(ctx)
	pf, _ := os.Create("/tmp/probe.prof")
	pprof.StartCPUProfile(pf)
	var n atomic.Int64
	n2 := &n
	var wg sync.WaitGroup
	stop := time.Now().Add(*dur)
	for w := range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i += *conc {
				if *rawMode {
					n := i % len(reqs)
					k := []string{fmt.Sprintf("dest:user%d@example.com", n), fmt.Sprintf("ip:10.%d.%d.%d", n>>16&255, n>>8&255, n&255), "global"}
					if err := rawScript.Run(ctx, rdb, k, 1000000000).Err(); err != nil {
						panic(err)
					}
					n2.Add(1)
					continue
				}
				if _, err := g.Allow(ctx, reqs[i%len(reqs)]); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	pprof.StopCPUProfile()
	info, _ := rdb.InfoMap(ctx, "commandstats").Result()
	var names []string
	for k := range info["Commandstats"] {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Printf("decisions/s %.0f\n", float64(n.Load())/dur.Seconds())
	for _, k := range names {
		v := info["Commandstats"][k]
		var calls, usec float64
		fmt.Sscanf(v, "calls=%g,usec=%g", &calls, &usec)
		if strings.Contains(k, "config") {
			continue
		}
		fmt.Printf("%-20s calls/decision %.2f  µs/decision %.2f\n", k, calls/float64(n.Load()), usec/float64(n.Load()))
	}
}

var rawScript = redis.NewScript(`
for i = 1, 3 do
  local n = redis.call('INCR', KEYS[i])
  if n == 1 then redis.call('PEXPIRE', KEYS[i], 3600000) end
  if n > tonumber(ARGV[1]) then return 0 end
end
return 1`)
