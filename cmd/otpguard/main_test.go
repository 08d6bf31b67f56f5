package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// freeAddr is a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestRunServesHealthOnTheEmbeddedRedis(t *testing.T) {
	addr := freeAddr(t)
	env := map[string]string{"GUARD_ADDR": addr}
	ctx, cancel := context.WithCancel(context.Background())
	var out testutil.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, &out, io.Discard) }()

	// The server starts in 1.5s on a calm machine, several times that on
	// a busy one (with -race), where a health check may also miss the
	// store's 50ms once: wait for a healthy answer, up to a minute.
	var status int
	var body []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
			if status == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthz for a minute: %d %s %v", status, body, err)
		}
	}
	if strings.TrimSpace(string(body)) != `{"status":"ok"}` {
		t.Fatalf("GET /healthz: %d %s", status, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(out.String(), "listening on http://"+addr) {
		t.Fatalf("stdout: %q", out.String())
	}
}

// TestALimitEndsWithItsWindowOnTheEmbeddedRedis: on make run's embedded
// Redis a rule's window ends in real time: a send refused by a limit of
// one a second is admitted again once the second has passed (a window
// kept in a key with a TTL never ended before: miniredis moved its TTLs
// only when told).
func TestALimitEndsWithItsWindowOnTheEmbeddedRedis(t *testing.T) {
	addr := freeAddr(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "guard.yaml")
	if err := os.WriteFile(cfg, []byte("store: {timeout: 10s}\nrules:\n  - {name: once-a-second, action: otp.send, key: [ip], limit: 1, window: 1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GUARD_ADDR": addr, "GUARD_CONFIG": cfg, "OUTBOX_PATH": filepath.Join(dir, "outbox.jsonl")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, io.Discard, io.Discard) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	send := func() int {
		resp, err := http.Post("http://"+addr+"/v1/otp/send", "application/json", strings.NewReader(`{"channel":"email","to":"ann@example.com","purpose":"verify"}`))
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var first int
	for deadline := time.Now().Add(time.Minute); first != http.StatusAccepted; time.Sleep(20 * time.Millisecond) {
		if first = send(); time.Now().After(deadline) {
			t.Fatalf("the first send for a minute: %d", first)
		}
	}
	if got := send(); got != http.StatusTooManyRequests {
		t.Fatalf("the second send within the second: %d, want 429", got)
	}
	start := time.Now()
	for got := 0; got != http.StatusAccepted; time.Sleep(100 * time.Millisecond) {
		if got = send(); got != http.StatusAccepted && got != http.StatusTooManyRequests {
			t.Fatalf("a send: %d", got)
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the window of 1s had not ended after 30s")
		}
	}
}

func TestRunRejectsABadConfigNamingTheField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - {name: r, action: login, key: [ip], limit: 0, window: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), func(k string) string { return map[string]string{"GUARD_CONFIG": path}[k] }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "rules[0] (r).limit") {
		t.Fatalf("want an error naming rules[0] (r).limit, got %v", err)
	}
}

// A GUARD_CONFIG file over config.MaxConfigBytes fails start-up naming the
// bound and the file's size, and is read no further than the bound.
func TestRunRefusesAnOversizedConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(strings.Repeat("# padding\n", 1<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), func(k string) string { return map[string]string{"GUARD_CONFIG": path}[k] }, io.Discard, io.Discard)
	if want := "GUARD_CONFIG: config: the document is 10485760 bytes; at most 262144 (config.MaxConfigBytes)"; err == nil || err.Error() != want {
		t.Fatalf("run: %v, want %s", err, want)
	}
	b, err := readConfig(path)
	if len(b) != config.MaxConfigBytes+1 || err == nil {
		t.Fatalf("readConfig read %d bytes (%v), want the bound and one", len(b), err)
	}
}
