package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/internal/app"
)

// subjects is an observer that keeps what ObserveSubject was told.
type subjects struct {
	mu   sync.Mutex
	seen []string
}

func (o *subjects) Observe(context.Context, string, string, guard.Decision) {}
func (o *subjects) ObserveSubject(_ context.Context, action, subject string, _ guard.Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, action+" "+subject)
}

// TestASubjectObserverIsToldFingerprintsOnly: an observer that watches
// subjects (the console's near-limit list) is told each decision's
// subject as its keyed fingerprint, never the address, and nothing for a
// request refused before it had a subject.
func TestASubjectObserverIsToldFingerprintsOnly(t *testing.T) {
	o := &subjects{}
	h, _ := serve(t, "rules:\n  - {name: r, action: otp.send, key: [destination], limit: 5, window: 1h}\n", func(s *app.Settings) { s.Observer = o })
	if w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"channel": "email", "to": "ann@example.com", "purpose": "login"}, false); w.Code != http.StatusAccepted {
		t.Fatalf("send: %d %v", w.Code, m)
	}
	if w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"channel": "email", "purpose": "login"}, false); w.Code != http.StatusBadRequest {
		t.Fatalf("a send without an address: %d %v", w.Code, m)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) != 1 || !strings.HasPrefix(o.seen[0], "otp.send ") || len(o.seen[0]) < len("otp.send ")+8 || strings.Contains(o.seen[0], "ann") {
		t.Errorf("subjects observed: %q, want one fingerprint for the send", o.seen)
	}
}
