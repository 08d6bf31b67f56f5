// Command soak drives the built otpguard server (the binary make run runs)
// at a steady mixed load against a real redis-server for a bounded time,
// then prints heap and goroutines at start and end, Redis keys without a
// TTL (must be 0), every 5xx, and the p99 latency per minute. No growth
// means no leak.
//
//	go run ./tests/soak [-duration 2m] [-rate 300]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/testonly/redistest"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

var (
	duration = flag.Duration("duration", 2*time.Minute, "how long the load runs")
	rate     = flag.Int("rate", 100, "requests per second (logins and signups cost a bcrypt each, ~60ms of CPU here)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

type stats struct {
	mu     sync.Mutex
	lat    map[int][]time.Duration // per minute
	status map[int]int
	fivexx []string
}

func run() error {
	dir, err := os.MkdirTemp("", "otpguard-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "otpguard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/otpguard")
	build.Dir = ".." // the product module, run from tests/ (make soak)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v\n%s", err, out)
	}
	rs, err := redistest.Start()
	if err != nil {
		return err
	}
	defer rs.Close()
	cfgPath := filepath.Join(dir, "config.yaml")
	// Behind a trusted proxy: the load spreads over many client IPs.
	if err := os.WriteFile(cfgPath, []byte("network: {trustedProxies: [127.0.0.0/8]}\n"), 0o600); err != nil {
		return err
	}
	// Free ports, never fixed ones: another program may hold any port, or
	// take one between the pick and the server's bind (it is then started
	// again on others).
	var logs bytes.Buffer
	p, ports, err := testutil.StartOnFreePorts(2, 15*time.Second, func(ports []int) *exec.Cmd {
		logs.Reset()
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), fmt.Sprintf("GUARD_ADDR=127.0.0.1:%d", ports[0]), fmt.Sprintf("GUARD_DEBUG_ADDR=127.0.0.1:%d", ports[1]), "REDIS_URL=redis://"+rs.Addr,
			"GUARD_SECRET=soak-secret-0123456789abcdef", "GUARD_SIGNING_KEY=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
			"OUTBOX_PATH="+filepath.Join(dir, "outbox.jsonl"), "GUARD_CONFIG="+cfgPath, "ADMIN_TOKEN=soak")
		cmd.Stderr = &logs
		return cmd
	})
	if err != nil {
		return fmt.Errorf("the server did not start: %w: %s", err, logs.String())
	}
	defer func() { _ = p.Cmd.Process.Signal(syscall.SIGTERM); _ = p.Wait() }()
	port, dport := ports[0], ports[1]
	debugURL = fmt.Sprintf("http://127.0.0.1:%d/debug/vars", dport)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for deadline := time.Now().Add(15 * time.Second); ; {
		if r, err := client.Get(base + "/healthz"); err == nil {
			r.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not start: %s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A population of users who can log in.
	for i := range 200 {
		post(client, base+"/v1/signup", fmt.Sprintf(`{"email":"soak%d@example.com","password":"a long soak passphrase %d"}`, i, i), fmt.Sprintf("10.9.%d.%d", i/250, i%250))
	}
	heap0, gor0, err := debugVars(client)
	if err != nil {
		return err
	}
	st := &stats{lat: map[int][]time.Duration{}, status: map[int]int{}}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return report(client, rs.Addr, st, start, heap0, gor0)
		case <-tick.C:
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			u := rand.IntN(5000)
			ip := fmt.Sprintf("198.18.%d.%d", u/250, u%250)
			var path, body string
			switch k := n % 20; {
			case k < 10:
				path, body = "/v1/otp/send", fmt.Sprintf(`{"channel":"email","to":"user%d@example.com","purpose":"login"}`, u)
			case k < 16:
				path, body = "/v1/otp/verify", fmt.Sprintf(`{"to":"user%d@example.com","purpose":"login","code":"%06d"}`, u, rand.IntN(1000000))
			case k < 19:
				pass := fmt.Sprintf("a long soak passphrase %d", u%200)
				if rand.IntN(4) == 0 {
					pass = "a typo"
				}
				path, body = "/v1/login", fmt.Sprintf(`{"username":"soak%d@example.com","password":%q}`, u%200, pass)
			default:
				path, body = "/v1/signup", fmt.Sprintf(`{"email":"new%d-%d@example.com","password":"a long soak passphrase"}`, n, u)
			}
			t0 := time.Now()
			status, raw := post(client, base+path, body, ip)
			d := time.Since(t0)
			minute := int(time.Since(start) / time.Minute)
			st.mu.Lock()
			st.lat[minute] = append(st.lat[minute], d)
			st.status[status]++
			if status >= 500 {
				st.fivexx = append(st.fivexx, fmt.Sprintf("%s %d %s", path, status, raw))
			}
			st.mu.Unlock()
		})
	}
}

func post(c *http.Client, url, body, ip string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := c.Do(req)
	if err != nil {
		return 599, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// debugURL is the server's expvar page, on the port it was given.
var debugURL string

func debugVars(c *http.Client) (heap uint64, goroutines int, err error) {
	// Collect first, so that the heap is what is live.
	for range 2 {
		resp, err := c.Get(debugURL)
		if err != nil {
			return 0, 0, err
		}
		var v struct {
			Goroutines int `json:"goroutines"`
			Memstats   struct {
				HeapAlloc uint64
			} `json:"memstats"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil {
			return 0, 0, err
		}
		heap, goroutines = v.Memstats.HeapAlloc, v.Goroutines
		time.Sleep(2 * time.Second) // idle connections close, GC runs
	}
	return heap, goroutines, nil
}

func report(c *http.Client, redisAddr string, st *stats, start time.Time, heap0 uint64, gor0 int) error {
	c.CloseIdleConnections()
	heap1, gor1, err := debugVars(c)
	if err != nil {
		return err
	}
	noTTL, total, err := keysWithoutTTL(redisAddr)
	if err != nil {
		return err
	}
	fmt.Printf("soak: %s at %d requests/s (50%% sends, 30%% verifies, 15%% logins, 5%% signups) over 5000 subjects\n\n", time.Since(start).Round(time.Second), *rate)
	fmt.Printf("heap in use     %6.1f MB at start, %6.1f MB at end\n", float64(heap0)/1e6, float64(heap1)/1e6)
	fmt.Printf("goroutines      %6d at start, %6d at end\n", gor0, gor1)
	fmt.Printf("Redis keys      %d, of which without a TTL: %d\n", total, noTTL)
	var codes []string
	for s, n := range st.status {
		codes = append(codes, fmt.Sprintf("%d×%d", n, s))
	}
	slices.Sort(codes)
	fmt.Printf("answers         %s\n", strings.Join(codes, " "))
	fmt.Printf("5xx             %d\n", len(st.fivexx))
	for i, s := range st.fivexx {
		if i == 5 {
			break
		}
		fmt.Printf("                %s\n", s)
	}
	for m := 0; ; m++ {
		l := st.lat[m]
		if len(l) == 0 {
			break
		}
		slices.Sort(l)
		fmt.Printf("minute %d        %d requests, p50 %s, p99 %s\n", m+1, len(l), l[len(l)/2].Round(time.Microsecond), l[len(l)*99/100].Round(time.Microsecond))
	}
	if noTTL > 0 || len(st.fivexx) > 0 {
		return fmt.Errorf("%d keys without a TTL, %d 5xx", noTTL, len(st.fivexx))
	}
	return nil
}

func keysWithoutTTL(addr string) (noTTL, total int, err error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		total++
		ttl, err := rdb.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			return 0, 0, err
		}
		if ttl == -1 { // go-redis: -1 is "no TTL" (PTTL -1)
			noTTL++
		}
	}
	return noTTL, total, iter.Err()
}
