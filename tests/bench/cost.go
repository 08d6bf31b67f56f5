package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/users"
)

// cost is what a request costs the cache, measured on redis-server with
// the built server and its default rules: the library calls (FCALL, one
// round trip each; the commands they run inside are counted by
// commandstats too and left out here), the bytes moved in and out, and the
// server's CPU time in the calls (INFO stats and commandstats before and
// after n requests of a kind, each from a new client address: a send to a
// new address, a wrong code for an address that has one, a right
// password). From them, an estimate of ElastiCache Serverless's ECPUs:
// every call at least 1, 1 per KB moved, and a call's CPU time at about
// 3 µs of vCPU per ECPU (the heuristic of AWS's own serverless cost
// estimator, aws/agent-toolkit-for-aws, from AWS's pricing example; AWS
// publishes no exact formula). The cache's CloudWatch metric
// ElastiCacheProcessingUnits is the exact figure.
func (b *bench) cost(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "otpguard-cost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	const n = 2000
	us, err := users.Open(filepath.Join(dir, "users.jsonl"), 4)
	if err != nil {
		return err
	}
	for i := range n {
		if err := us.Add(fmt.Sprintf("u%d@example.com", i), "correct horse battery staple"); err != nil {
			return err
		}
	}
	us.Close()
	addr, stop, err := b.startServer(dir, "{timeout: 2s}", "AUTH=local", "USERS_PATH="+filepath.Join(dir, "users.jsonl"))
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body string, i int, want int) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", 1+i>>16&255, i>>8&255, i&255))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
		return nil
	}
	admin := redis.NewClient(&redis.Options{Addr: b.srv.Addr})
	defer admin.Close()
	kinds := []struct {
		name string
		do   func(i int) error
	}{
		{"POST /v1/otp/send (a new address, sent)", func(i int) error {
			return post("/v1/otp/send", fmt.Sprintf(`{"channel":"email","to":"c%d@example.com","purpose":"login"}`, i), i, 202)
		}},
		{"POST /v1/otp/verify (a wrong code)", func(i int) error {
			return post("/v1/otp/verify", fmt.Sprintf(`{"to":"c%d@example.com","purpose":"login","code":"000000"}`, i), i, 422)
		}},
		{"POST /v1/login (a right password, the account's first)", func(i int) error {
			return post("/v1/login", fmt.Sprintf(`{"username":"u%d@example.com","password":"correct horse battery staple"}`, i), i, 200)
		}},
	}
	fmt.Printf("\ncost: what one request costs the cache (built server, default rules, redis-server %s, %d requests of each)\n\n",
		redisVersion(ctx, admin), n)
	tw := newTable("request\tlibrary calls\tbytes in\tbytes out\tserver CPU µs\tECPU (est.)\t$ per million requests\t")
	for _, k := range kinds {
		s0, err := cacheStats(ctx, admin)
		if err != nil {
			return err
		}
		for i := range n {
			if err := k.do(i); err != nil {
				return err
			}
		}
		s1, err := cacheStats(ctx, admin)
		if err != nil {
			return err
		}
		d := s1.minus(s0)
		calls, in, out, cpu := d.by["fcall"][0]/n, d.in/n, d.out/n, d.by["fcall"][1]/n
		ecpu := max(calls, (in+out)/1024, cpu/vcpuPerECPU)
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\t%.1f\t%.1f\t$%.4f\t\n", k.name, calls, in, out, cpu, ecpu, ecpu*ecpuPrice*1e6)
		if os.Getenv("COST_DETAIL") != "" {
			for c, v := range d.by {
				fmt.Fprintf(os.Stderr, "  %s: %s %.2f calls %.1f µs\n", k.name, c, v[0]/n, v[1]/n)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Printf("(ECPU: max(calls, KB moved, CPU / %.0f µs); $%.4f per million ECPUs, ElastiCache Serverless for Valkey, us-east-1)\n", vcpuPerECPU, ecpuPrice*1e6)
	return nil
}

// vcpuPerECPU is the vCPU time (µs) one ECPU buys, as AWS's estimator
// assumes.
const vcpuPerECPU = 3.0

// ecpuPrice is ElastiCache Serverless for Valkey's price per ECPU in
// us-east-1 ($0.0023 per million; Redis OSS: $0.0034).
const ecpuPrice = 0.0023 / 1e6

type stats struct {
	calls, in, out, usec float64
	by                   map[string][2]float64 // command: calls, usec
}

func (s stats) minus(o stats) stats {
	d := stats{calls: s.calls - o.calls, in: s.in - o.in, out: s.out - o.out, usec: s.usec - o.usec, by: map[string][2]float64{}}
	for k, v := range s.by {
		if w := [2]float64{v[0] - o.by[k][0], v[1] - o.by[k][1]}; w[0] > 0 {
			d.by[k] = w
		}
	}
	return d
}

// cacheStats reads the server's totals: commands run and their CPU time
// (commandstats, the INFO calls themselves left out), bytes in and out.
func cacheStats(ctx context.Context, c *redis.Client) (stats, error) {
	s := stats{by: map[string][2]float64{}}
	raw, err := c.Info(ctx, "stats", "commandstats").Result()
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(raw, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "total_net_input_bytes":
			s.in, _ = strconv.ParseFloat(v, 64)
		case k == "total_net_output_bytes":
			s.out, _ = strconv.ParseFloat(v, 64)
		case strings.HasPrefix(k, "cmdstat_") && k != "cmdstat_info":
			var e [2]float64
			for _, f := range strings.Split(v, ",") {
				fk, fv, _ := strings.Cut(f, "=")
				x, _ := strconv.ParseFloat(fv, 64)
				switch fk {
				case "calls":
					s.calls += x
					e[0] = x
				case "usec":
					s.usec += x
					e[1] = x
				}
			}
			s.by[strings.TrimPrefix(k, "cmdstat_")] = e
		}
	}
	return s, nil
}
