package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/guard/message"
)

// outbox keeps the messages sent.
type outbox struct {
	mu   sync.Mutex
	msgs []message.Message
}

func (o *outbox) Send(_ context.Context, m message.Message) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.msgs = append(o.msgs, m)
	return nil
}

func (o *outbox) last(t *testing.T) message.Message {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.msgs) == 0 {
		t.Fatal("no message sent")
	}
	return o.msgs[len(o.msgs)-1]
}

// local is the API on an embedded Redis with local users and rules.
func local(t *testing.T, rules string) (http.Handler, *outbox) {
	t.Helper()
	return serve(t, "rules:\n"+rules, nil)
}

func post(t *testing.T, h http.Handler, path string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	r := httptest.NewRequest("POST", path, strings.NewReader(string(b)))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = "198.51.100.7:4000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	return w.Code, m
}

// TestAStepUpCodeOpensItsOwnSessionOnly: two challenged logins of one
// account, each with its own code: a session opens with its own code,
// never with the other's (a code is issued under its session's purpose;
// issued under one purpose for all, the second code replaced the first
// and opened the first session: a mutant an outside review injected, that
// no test caught).
func TestAStepUpCodeOpensItsOwnSessionOnly(t *testing.T) {
	h, out := local(t, "  - {name: stepup, action: login, key: [global], limit: 1, window: 1h, mode: challenge}\n")
	login := map[string]string{"username": "ann@example.com", "password": "correct horse battery staple"}
	if code, r := post(t, h, "/v1/login", login); code != 200 || r["status"] != "authenticated" {
		t.Fatalf("the hour's first login: %d %v", code, r)
	}
	var sessions, codes [2]string
	for i := range 2 {
		code, r := post(t, h, "/v1/login", login)
		if code != 200 || r["status"] != "challenge" {
			t.Fatalf("login %d: %d %v", i+2, code, r)
		}
		sessions[i], _ = r["session"].(string)
		m := out.last(t)
		if m.To != "ann@example.com" || m.Code == "" {
			t.Fatalf("the step-up code: %+v", m)
		}
		codes[i] = m.Code
	}
	if sessions[0] == sessions[1] || sessions[0] == "" {
		t.Fatalf("sessions %q", sessions)
	}
	if codes[0] == codes[1] {
		// one chance in a million: two codes alike prove nothing here
		t.Skip("the two step-up codes are equal")
	}
	for i, j := range []int{1, 0} {
		if code, r := post(t, h, "/v1/login/challenge", map[string]string{"session": sessions[i], "code": codes[j]}); code != 401 {
			t.Fatalf("session %d with session %d's code: %d %v", i+1, j+1, code, r)
		}
	}
	for i := range 2 {
		if code, r := post(t, h, "/v1/login/challenge", map[string]string{"session": sessions[i], "code": codes[i]}); code != 200 || r["status"] != "authenticated" {
			t.Fatalf("session %d with its own code: %d %v", i+1, code, r)
		}
	}
}
