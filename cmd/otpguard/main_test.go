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

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

func TestRunServesHealthOnTheEmbeddedRedis(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
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

// A GUARD_CONFIG file over guard.MaxConfigBytes fails start-up naming the
// bound and the file's size, and is read no further than the bound.
func TestRunRefusesAnOversizedConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(strings.Repeat("# padding\n", 1<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), func(k string) string { return map[string]string{"GUARD_CONFIG": path}[k] }, io.Discard, io.Discard)
	if want := "GUARD_CONFIG: config: the document is 10485760 bytes; at most 262144 (guard.MaxConfigBytes)"; err == nil || err.Error() != want {
		t.Fatalf("run: %v, want %s", err, want)
	}
	b, err := readConfig(path)
	if len(b) != guard.MaxConfigBytes+1 || err == nil {
		t.Fatalf("readConfig read %d bytes (%v), want the bound and one", len(b), err)
	}
}
