package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/testonly/redistest"
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
	// A victim at the limit (2 sends a minute) before the restart.
	victimBefore := 0
	for s.send(t, "email", "victim@example.com", "login").status == http.StatusAccepted {
		victimBefore++
	}

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
	if n := len(s.messages(t)); n != 1+victimBefore {
		t.Errorf("%d messages in the outbox, want only the %d sent before the outage", n, 1+victimBefore)
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
	// The restarted Redis is empty (no persistence): counters start afresh
	// (the victim gets a new minute's sends at once), and the pending code
	// is gone; a new one works end to end.
	// (The process's deny cache still answers the victim's denial for up
	// to store.denyCache.ttl, 2s, after which Redis is asked again.)
	time.Sleep(2100 * time.Millisecond)
	victimAfter := 0
	for s.send(t, "email", "victim@example.com", "login").status == http.StatusAccepted {
		victimAfter++
	}
	t.Logf("a Redis restarted empty: the victim at its limit (%d sends) got %d more once the deny cache's 2s ran out; the code pending before it approves: %d",
		victimBefore, victimAfter, s.verify(t, "before@example.com", "login", code).status)
	if victimBefore != 2 || victimAfter != 2 {
		t.Errorf("victim: %d sends before, %d after the restart; want 2 and 2 (counters reset with the data)", victimBefore, victimAfter)
	}
	if r := s.send(t, "email", "after@example.com", "login"); r.status != http.StatusAccepted {
		t.Fatalf("send after the restart: %d %s", r.status, r.raw)
	}
	if r := s.verify(t, "after@example.com", "login", s.lastCode(t, "after@example.com")); r.status != http.StatusOK {
		t.Fatalf("verify after the restart: %d %s", r.status, r.raw)
	}
}
