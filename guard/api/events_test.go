package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// published keeps the security events.
type published struct {
	mu sync.Mutex
	es []events.Event
}

func (p *published) Publish(_ context.Context, e events.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.es = append(p.es, e)
	return nil
}

func (p *published) of(kind string) []events.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []events.Event
	for _, e := range p.es {
		if e.DetailType == kind {
			out = append(out, e)
		}
	}
	return out
}

// records reads the JSON log lines written to b.
func records(t *testing.T, b *testutil.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestEventsAndDecisionRecords: a lockout, a tripped global budget and an
// administrator's unblock are published once each, with fingerprints;
// every request leaves one decision record with its rules (and the
// platform's request id); no log line or event holds the address, the
// IP, the code or the password.
func TestEventsAndDecisionRecords(t *testing.T) {
	logs, pub := &testutil.Buffer{}, &published{}
	h, out := serve(t, `rules:
  - {name: locks, action: login, key: [account], count: failures, limit: 1, window: 1h, lockout: {initial: 10m, factor: 2, max: 1h}}
  - {name: cap, action: otp.send, key: [global], limit: 1, window: 1h}
  - {name: per-ip, action: otp.send, key: [ip], limit: 1, window: 1h, mode: shadow}
`, func(s *app.Settings) {
		s.Log = slog.New(slog.NewJSONHandler(logs, nil))
		s.Events = pub
		s.Caller = func(*http.Request) string { return "arn:aws:iam::123456789012:role/ops" }
	})
	const password = "correct horse battery staple"
	login := func(pw string) int {
		t.Helper()
		w, _ := call(t, h, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": pw}, false)
		return w.Code
	}
	if c := login("wrong password one"); c != 401 {
		t.Fatalf("a wrong password: %d", c)
	}
	if c := login("wrong password two"); c != 429 {
		t.Fatalf("past the failures: %d", c)
	}
	if c := login(password); c != 429 {
		t.Fatalf("the right password while locked: %d", c)
	}
	locks := pub.of(events.LockoutStarted)
	if len(locks) != 1 {
		t.Fatalf("lockout events: %+v", pub.es)
	}
	d := locks[0].Detail
	if d["rule"] != "locks" || d["action"] != "login" || !slices.Equal(d["dimensions"].([]string), []string{"account"}) {
		t.Errorf("lockout: %v", d)
	}
	if s, _ := d["lockedForSeconds"].(int); s < 1 || s > 600 {
		t.Errorf("lockedForSeconds %v", d["lockedForSeconds"])
	}
	subject, _ := d["subject"].(string)
	if subject == "" {
		t.Errorf("the lockout names its subject by fingerprint: %v", d)
	}

	r := httptest.NewRequest("POST", "/v1/otp/send", strings.NewReader(`{"to":"ann@example.com","channel":"email","purpose":"login"}`))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = "198.51.100.7:4000"
	r = r.WithContext(api.WithRequestID(r.Context(), "req-7f3a"))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 202 && w.Code != 200 {
		t.Fatalf("send: %d %s", w.Code, w.Body)
	}
	code := out.last(t).Code
	for range 2 {
		if w, _ := call(t, h, "POST", "/v1/otp/send", map[string]string{"to": "bob@example.com", "channel": "email", "purpose": "login"}, false); w.Code != 429 {
			t.Fatalf("past the global cap: %d", w.Code)
		}
	}
	budget := pub.of(events.BudgetTripped)
	if len(budget) != 1 || budget[0].Detail["rule"] != "cap" || budget[0].Detail["kind"] != "global" || budget[0].Detail["subject"] != "" {
		t.Fatalf("budget events: %+v", budget)
	}
	if s, _ := budget[0].Detail["retryAfterSeconds"].(int); s < 1 || s > 3600 {
		t.Errorf("retryAfterSeconds %v", budget[0].Detail)
	}

	if w, _ := call(t, h, "DELETE", "/v1/blocks/account/ann@example.com", nil, true); w.Code != 204 {
		t.Fatalf("unblock: %d", w.Code)
	}
	un := pub.of(events.AdminUnblock)
	if len(un) != 1 || un[0].Detail["caller"] != "arn:aws:iam::123456789012:role/ops" || un[0].Detail["dimension"] != "account" ||
		!slices.Equal(un[0].Detail["rules"].([]string), []string{"locks"}) || un[0].Detail["subject"] != subject {
		t.Fatalf("unblock events: %+v (the lockout's subject %q)", un, subject)
	}
	if c := login(password); c != 200 {
		t.Errorf("the right password after the unblock: %d", c)
	}

	recs := records(t, logs)
	var decisions []map[string]any
	for _, rec := range recs {
		if rec["msg"] == "decision" {
			decisions = append(decisions, rec)
		}
	}
	// four logins, three sends
	if len(decisions) != 7 {
		t.Fatalf("%d decision records: %v", len(decisions), decisions)
	}
	want := []struct{ action, outcome, rules string }{
		{"login", "invalid_credentials", `^locks=allowed/0$`},
		{"login", "rate_limited", `^locks=denied/0/locked$`},
		{"login", "rate_limited", `^locks=denied/0/locked$`},
		{"otp.send", "", `^cap=allowed/0 per-ip=allowed/0/shadow$`},
		{"otp.send", "rate_limited", `^cap=denied/0 per-ip=skipped$`},
		{"otp.send", "rate_limited", `^cap=denied/0/cached per-ip=skipped$`},
	}
	for i, w := range want {
		rec := decisions[i]
		if rec["action"] != w.action || (w.outcome != "" && rec["outcome"] != w.outcome) || !regexp.MustCompile(w.rules).MatchString(rec["rules"].(string)) {
			t.Errorf("record %d: %v, want %+v", i, rec, w)
		}
	}
	if decisions[3]["requestId"] != "req-7f3a" || decisions[4]["requestId"] != nil {
		t.Errorf("the request id rides on its own record only: %v / %v", decisions[3], decisions[4])
	}
	for i, rec := range decisions {
		// the request's time in milliseconds: these take a few (a
		// bcrypt comparison at most), never seconds
		if ms, ok := rec["ms"].(float64); !ok || ms < 0 || ms > 5000 {
			t.Errorf("record %d: ms %v", i, rec["ms"])
		}
	}
	if decisions[1]["allowed"] != false || decisions[1]["deniedBy"] != "locks" || decisions[0]["allowed"] != true {
		t.Errorf("allowed and deniedBy: %v / %v", decisions[0], decisions[1])
	}
	all := logs.String()
	for _, e := range pub.es {
		b, _ := json.Marshal(e)
		all += string(b)
	}
	for _, secret := range []string{"ann@example.com", "bob@example.com", "198.51.100.7", password, "wrong password", code} {
		if strings.Contains(all, secret) {
			t.Errorf("the logs or events hold %q", secret)
		}
	}
}

// TestRevokedDevicesAreUntrusted: a device token an account earned is
// trusted until the account's devices are revoked, then never again.
func TestRevokedDevicesAreUntrusted(t *testing.T) {
	h, _ := serve(t, `rules:
  - {name: strangers, action: login, key: [account], limit: 50, window: 1h, when: {device: untrusted}}
`, nil)
	sub := map[string]string{"account": "ann", "ip": "203.0.113.9"}
	_, m := call(t, h, "POST", "/v1/outcomes", map[string]any{"action": "login", "subject": sub, "outcome": "success", "issueDevice": true}, true)
	tok, _ := m["deviceToken"].(string)
	if tok == "" {
		t.Fatalf("no device token: %v", m)
	}
	device := func() string {
		t.Helper()
		_, m := call(t, h, "POST", "/v1/decisions", map[string]any{"action": "login", "subject": map[string]string{"account": "ann", "ip": "203.0.113.9", "device": tok}}, true)
		d, _ := m["device"].(string)
		return d
	}
	if d := device(); d != "trusted" {
		t.Fatalf("a fresh device token: %q", d)
	}
	if w, _ := call(t, h, "DELETE", "/v1/devices/ann", nil, true); w.Code != 204 || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("revoke: %d", w.Code)
	}
	if d := device(); d != "untrusted" {
		t.Errorf("after the revocation: %q", d)
	}
	w, m := call(t, h, "DELETE", "/v1/devices/"+strings.Repeat("a", 300), nil, true)
	problemOf(t, w, m, 400, "invalid_request")
	if w, _ := call(t, h, "DELETE", "/v1/devices/ann", nil, false); w.Code != 401 {
		t.Errorf("revoking without the backend's credentials: %d", w.Code)
	}
}

// TestDecisionRecordsNameTheirSubject: a backend's decision leaves a
// record with the fingerprints of its subject and IP, never the values.
func TestDecisionRecordsNameTheirSubject(t *testing.T) {
	logs := &testutil.Buffer{}
	h, _ := serve(t, "rules:\n  - {name: r, action: login, key: [account], limit: 5, window: 1h}\n", func(s *app.Settings) {
		s.Log = slog.New(slog.NewJSONHandler(logs, nil))
	})
	for _, sub := range []map[string]string{{"account": "ann", "ip": "203.0.113.9"}, {"account": "bob"}} {
		if w, m := call(t, h, "POST", "/v1/decisions", map[string]any{"action": "login", "subject": sub}, true); w.Code != 200 {
			t.Fatalf("%v: %d %v", sub, w.Code, m)
		}
	}
	var recs []map[string]any
	for _, r := range records(t, logs) {
		if r["msg"] == "decision" {
			recs = append(recs, r)
		}
	}
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	a, b := recs[0], recs[1]
	if s, _ := a["subject"].(string); len(s) < 8 || a["subject"] == b["subject"] {
		t.Errorf("the subjects' fingerprints: %v / %v", a["subject"], b["subject"])
	}
	if ip, _ := a["ip"].(string); len(ip) < 8 || b["ip"] != "" {
		t.Errorf("the IP's fingerprint, and none without one: %v / %v", a["ip"], b["ip"])
	}
	if all := logs.String(); strings.Contains(all, `"ann"`) || strings.Contains(all, "203.0.113.9") {
		t.Errorf("a record holds the account or the IP: %s", all)
	}
}

// TestALockoutDoSIsNamedFromTheFailuresNetworks: an account locked by
// failures from three networks is a suspected lockout-DoS, named by the
// rule that counted those networks; the networks its owner proved
// (a rule counting successes) never make one.
func TestALockoutDoSIsNamedFromTheFailuresNetworks(t *testing.T) {
	rules := `rules:
  - {name: proven, action: login, key: [account], algorithm: distinct, of: ip/16, count: successes, limit: 10, window: 720h}
  - {name: nets, action: login, key: [account], algorithm: distinct, of: ip/16, count: failures, limit: 10, window: 1h}
  - {name: locks, action: login, key: [account], count: failures, limit: 3, window: 1h, lockout: {initial: 10m, factor: 2, max: 1h}}
`
	login := func(h http.Handler, ip, pw string) int {
		r := httptest.NewRequest("POST", "/v1/login", strings.NewReader(`{"username":"ann@example.com","password":"`+pw+`"}`))
		r.Header.Set("Content-Type", "application/json")
		r.RemoteAddr = ip + ":4000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	const right = "correct horse battery staple"
	// failures from three networks
	pub := &published{}
	h, _ := serve(t, rules, func(s *app.Settings) { s.Events = pub })
	for i, ip := range []string{"203.0.113.9", "198.51.100.7", "192.0.2.1"} {
		if c := login(h, ip, "wrong guess"); c != 401 {
			t.Fatalf("failure %d: %d", i+1, c)
		}
	}
	dos := pub.of(events.LockoutDoS)
	if len(pub.of(events.LockoutStarted)) != 1 || len(dos) != 1 || dos[0].Detail["networkRule"] != "nets" || dos[0].Detail["networks"] != int64(3) {
		t.Fatalf("three networks: %+v", pub.es)
	}
	// the owner proved three networks; the failures come from one
	pub = &published{}
	h, _ = serve(t, rules, func(s *app.Settings) { s.Events = pub })
	for _, ip := range []string{"203.0.113.9", "198.51.100.7", "192.0.2.1"} {
		if c := login(h, ip, right); c != 200 {
			t.Fatalf("the owner from %s: %d", ip, c)
		}
	}
	for range 3 {
		login(h, "100.64.0.1", "wrong guess")
	}
	if len(pub.of(events.LockoutStarted)) != 1 || len(pub.of(events.LockoutDoS)) != 0 {
		t.Errorf("failures from one network after the owner proved three: %+v", pub.es)
	}
}
