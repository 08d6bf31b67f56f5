package app_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/outbox"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
	"github.com/redis/go-redis/v9"
)

type discard struct{}

func (discard) Send(context.Context, message.Message) error { return nil }

// BenchmarkSendHTTP is POST /v1/otp/send through the composed server
// (decode, identifiers, the default rules on redis-server, the code
// stored, the message rendered and handed to a sender that drops it, the
// decision's log line), each request to a new address from a new client
// address, so every one is allowed and sent: the server's own CPU per
// request is what -cpuprofile shows of it.
func BenchmarkSendHTTP(b *testing.B) {
	rdb, cfg, key := benchServer(b, "2s")
	a, err := app.New(context.Background(), app.Settings{Redis: rdb, Secret: []byte("0123456789abcdef0123"),
		Senders: func(queue.Host) (message.Sender, error) { return discard{}, nil },
		Log:     slog.New(slog.NewJSONHandler(io.Discard, nil))}, cfg, app.Keys{Signing: key})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if w := send(a, int64(i)); w.Code != http.StatusAccepted {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkSendHTTPServer is BenchmarkSendHTTP as the local server
// (cmd/otpguard) runs it: 16 requests at once, the store's calls
// coalesced (Coalesce: GOMAXPROCS), each message through the in-process
// delivery queue (8 workers) to an outbox that drops it, each delivered
// before the clock stops. Without net/http: the handler's and the
// queue's own work. cpu-µs/op is the process's CPU
// time (user and system) per request, which a busy machine inflates less
// than the wall time.
func BenchmarkSendHTTPServer(b *testing.B) {
	rdb, cfg, key := benchServer(b, "1s")
	var locals []*queue.Local
	a, err := app.New(context.Background(), app.Settings{Redis: rdb, Secret: []byte("0123456789abcdef0123"),
		Senders: func(h queue.Host) (message.Sender, error) {
			q, local, err := queue.InProcess(h, outbox.New(io.Discard, nil), 8, queue.Options{})
			locals = append(locals, local)
			return q, err
		},
		Log:      slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Coalesce: runtime.GOMAXPROCS(0)}, cfg, app.Keys{Signing: key})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		a.Close()
		for _, l := range locals {
			l.Close()
		}
	}()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16 / runtime.GOMAXPROCS(0))
	cpu0 := testutil.CPUTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if w := send(a, n.Add(1)); w.Code != http.StatusAccepted {
				b.Errorf("%d %s", w.Code, w.Body)
			}
		}
	})
	// the messages still queued are part of the sends' cost: the workers
	// fall behind 16 senders (about a fifth of 5000 sends waited when
	// they were done)
	for _, l := range locals {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			if d, _ := l.Depth(context.Background()); d == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the queue did not drain within a minute")
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(testutil.CPUTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
}

// benchServer starts a redis-server for the benchmark and returns the
// product's client of it (redisstore.NewClient, as the server has it), the
// default configuration behind trusted proxies with the store's timeout,
// and a signing key.
func benchServer(b *testing.B, timeout string) (redis.UniversalClient, config.Config, ed25519.PrivateKey) {
	rs, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rs.Close)
	rdb, err := redisstore.NewClient("redis://" + rs.Addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rdb.Close() })
	_, key, _ := ed25519.GenerateKey(nil)
	cfg, err := config.Parse([]byte("network: {trustedProxies: [127.0.0.0/8, 192.0.2.0/24]}\nstore: {timeout: " + timeout + "}\n"))
	if err != nil {
		b.Fatal(err)
	}
	return rdb, cfg, key
}

// send is the i-th POST /v1/otp/send: a new address from a new client
// address, so the rules allow it.
func send(a *app.App, i int64) *httptest.ResponseRecorder {
	body := fmt.Sprintf(`{"channel":"email","to":"h%d@example.com","purpose":"login"}`, i)
	r := httptest.NewRequest(http.MethodPost, "/v1/otp/send", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", 1+i>>16&255, i>>8&255, i&255))
	w := httptest.NewRecorder()
	a.ServeHTTP(w, r)
	return w
}
