package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/redistest"
)

// faultBound is the longest a send or verify may take to answer 503 while
// Redis is down. Each request makes at most 3 store calls, each bounded by
// store.timeout (50ms); a refused connection fails at once. The bound is
// generous for a shared, noisy machine; the test logs what it measured.
const faultBound = time.Second

// TestRedisStoppedAndRestarted: with Redis gone, the OTP routes fail
// closed with 503 within faultBound; once Redis is back, the same server
// process serves again.
func TestRedisStoppedAndRestarted(t *testing.T) {
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	s := start(t, "redis://"+rs.Addr, "")
	if r := s.send(t, "email", "before@example.com", "login"); r.status != http.StatusAccepted {
		t.Fatalf("send with Redis up: %d %s", r.status, r.raw)
	}
	code := s.lastCode(t, "before@example.com")

	rs.Stop()
	for _, c := range []struct {
		name string
		call func() reply
	}{
		{"send", func() reply { return s.send(t, "email", "during@example.com", "login") }},
		{"verify", func() reply { return s.verify(t, "before@example.com", "login", code) }},
		{"healthz", func() reply { return s.do(t, http.MethodGet, "/healthz", "") }},
	} {
		for range 3 {
			r := c.call()
			if r.status != http.StatusServiceUnavailable || r.str("code") != "store_unavailable" || r.header.Get("Retry-After") == "" {
				t.Fatalf("%s with Redis down: %d %s, want 503 store_unavailable", c.name, r.status, r.raw)
			}
			if r.took > faultBound {
				t.Errorf("%s with Redis down took %s, over the %s bound", c.name, r.took, faultBound)
			}
			t.Logf("%s with Redis down: 503 in %s", c.name, r.took)
		}
	}
	if n := len(s.messages(t)); n != 1 {
		t.Errorf("%d messages in the outbox, want only the one sent before the outage", n)
	}

	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.do(t, http.MethodGet, "/healthz", "").status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("healthz still failing 10s after Redis restarted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The restarted Redis is empty (no persistence): the old code is gone,
	// a new one works end to end.
	if r := s.send(t, "email", "after@example.com", "login"); r.status != http.StatusAccepted {
		t.Fatalf("send after the restart: %d %s", r.status, r.raw)
	}
	if r := s.verify(t, "after@example.com", "login", s.lastCode(t, "after@example.com")); r.status != http.StatusOK {
		t.Fatalf("verify after the restart: %d %s", r.status, r.raw)
	}
}
