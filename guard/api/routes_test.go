package api_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/users"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/localredis"
)

// The routes' answers, each field a client branches on, on the whole API
// (internal/app) over an embedded Redis: the tests of this package, so a
// change in a handler fails here, in seconds, not only in tests/e2e.

const adminToken = "an admin token for the tests"

// serve is the API with doc as its config, the internal routes open to
// adminToken, and edit's changes to the settings.
func serve(t *testing.T, doc string, edit func(*app.Settings)) (http.Handler, *outbox) {
	t.Helper()
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return serveOn(t, srv, doc, edit)
}

// serveOn is serve on the embedded Redis srv (a test may stop it).
func serveOn(t *testing.T, srv *localredis.Server, doc string, edit func(*app.Settings)) (http.Handler, *outbox) {
	t.Helper()
	cfg, err := config.Parse([]byte("store: {timeout: 10s}\n" + doc))
	if err != nil {
		t.Fatal(err)
	}
	us, err := users.Open("", 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := us.Add("ann@example.com", "correct horse battery staple"); err != nil {
		t.Fatal(err)
	}
	out := &outbox{}
	_, key, _ := ed25519.GenerateKey(nil)
	s := app.Settings{Redis: srv.Client(), Secret: []byte("0123456789abcdef0123"), Auth: us,
		Senders: func(queue.Host) (message.Sender, error) { return out, nil }, Log: slog.New(slog.DiscardHandler),
		Admin: app.BearerAdmin(adminToken)}
	if edit != nil {
		edit(&s)
	}
	a, err := app.New(context.Background(), s, cfg, app.Keys{Signing: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, out
}

// call sends one request (a JSON body unless nil; the admin's bearer
// when admin) and returns the recorder and its decoded body.
func call(t *testing.T, h http.Handler, method, path string, body any, admin bool, header ...string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	r := httptest.NewRequest(method, path, rd)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if admin {
		r.Header.Set("Authorization", "Bearer "+adminToken)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	r.RemoteAddr = "198.51.100.7:4000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	return w, m
}

// problemOf checks a problem answer's status and code.
func problemOf(t *testing.T, w *httptest.ResponseRecorder, m map[string]any, status int, code string) {
	t.Helper()
	if w.Code != status || m["code"] != code || m["status"] != float64(status) || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("want a %d %s problem, got %d %s %v", status, code, w.Code, w.Header().Get("Content-Type"), m)
	}
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("a problem is not cached: Cache-Control %q", w.Header().Get("Cache-Control"))
	}
}

func errorsOf(m map[string]any) map[string]any {
	e, _ := m["errors"].(map[string]any)
	return e
}

// TestVerifyAnswers: a code is checked for its shape before the store;
// the right one is approved once, with a signed token for its address and
// purpose (and a device token for login), and a wrong, reused or absent
// one is a 422.
func TestVerifyAnswers(t *testing.T) {
	h, out := serve(t, "rules:\n  - {name: wide, action: otp.verify, key: [ip], limit: 100, window: 1h}\n", nil)
	send := func(to, purpose string) string {
		t.Helper()
		w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"to": to, "channel": "email", "purpose": purpose}, false)
		if w.Code != 202 && w.Code != 200 {
			t.Fatalf("send: %d %v", w.Code, m)
		}
		return out.last(t).Code
	}
	for _, c := range []struct {
		body  map[string]string
		field string
		want  string
	}{
		{map[string]string{"to": "ann@example.com", "purpose": "login", "code": "12345"}, "code", "must be 6 digits"},
		{map[string]string{"to": "ann@example.com", "purpose": "login", "code": "1234567"}, "code", "must be 6 digits"},
		{map[string]string{"to": "ann@example.com", "purpose": "login", "code": "12a456"}, "code", "must be 6 digits"},
		{map[string]string{"to": "ann@example.com", "purpose": "login", "code": "/23456"}, "code", "must be 6 digits"},
		{map[string]string{"to": "ann@example.com", "purpose": "login", "code": ":23456"}, "code", "must be 6 digits"},
		{map[string]string{"to": "ann@example.com", "purpose": "", "code": "123456"}, "purpose", "required: one of signup, login, reset, verify"},
		{map[string]string{"to": "ann@example.com", "purpose": "pay", "code": "123456"}, "purpose", "must be one of signup, login, reset, verify"},
		{map[string]string{"to": "not an address", "purpose": "login", "code": "123456"}, "to", ""},
	} {
		w, m := call(t, h, "POST", "/v1/otp/verify", c.body, false)
		problemOf(t, w, m, 400, "invalid_request")
		got, ok := errorsOf(m)[c.field].(string)
		if !ok || (c.want != "" && got != c.want) || len(errorsOf(m)) != 1 {
			t.Errorf("%v: errors %v, want only %s: %q", c.body, errorsOf(m), c.field, c.want)
		}
	}

	code := send("ann@example.com", "login")
	wrong := "000000"
	if code == wrong {
		wrong = "000001"
	}
	w, m := call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": "ann@example.com", "purpose": "login", "code": wrong}, false)
	problemOf(t, w, m, 422, "invalid_code")
	w, m = call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": "ann@example.com", "purpose": "reset", "code": code}, false)
	problemOf(t, w, m, 422, "invalid_code") // another purpose's code
	w, m = call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": "bob@example.com", "purpose": "login", "code": code}, false)
	problemOf(t, w, m, 422, "invalid_code") // no code at all

	w, m = call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": "ann@example.com", "purpose": "login", "code": code}, false)
	if w.Code != 200 || m["status"] != "approved" || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("the right code: %d %v", w.Code, m)
	}
	claims := jwtClaims(t, m["token"])
	if claims["sub"] != "ann@example.com" || claims["purpose"] != "login" || claims["channel"] != "email" {
		t.Errorf("the token's claims: %v", claims)
	}
	if dt, _ := m["deviceToken"].(string); dt == "" {
		t.Errorf("a login code gives the account a device token: %v", m)
	}
	w, m = call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": "ann@example.com", "purpose": "login", "code": code}, false)
	problemOf(t, w, m, 422, "invalid_code") // used

	code = send("ann@example.com", "verify")
	w, m = call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": "ann@example.com", "purpose": "verify", "code": code}, false)
	if w.Code != 200 || m["status"] != "approved" {
		t.Fatalf("a verify code: %d %v", w.Code, m)
	}
	if _, ok := m["deviceToken"]; ok {
		t.Errorf("only login and reset codes give a device token: %v", m)
	}
}

// jwtClaims decodes a token's payload (its signature is the token
// package's to check).
func jwtClaims(t *testing.T, tok any) map[string]any {
	t.Helper()
	s, _ := tok.(string)
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", s)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestJWKSAndHealth: the keys are public and cacheable; health says ok
// while the store answers, 503 when it does not.
func TestJWKSAndHealth(t *testing.T) {
	failing := false
	h, _ := serve(t, "", func(s *app.Settings) {
		s.Health = func(context.Context) error {
			if failing {
				return errors.New("down")
			}
			return nil
		}
	})
	w, m := call(t, h, "GET", "/.well-known/jwks.json", nil, false)
	keys, _ := m["keys"].([]any)
	if w.Code != 200 || len(keys) != 1 || w.Header().Get("Cache-Control") != "public, max-age=300" || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("jwks: %d %v %v", w.Code, w.Header(), m)
	}
	if w, _ := call(t, h, "HEAD", "/.well-known/jwks.json", nil, false); w.Code != 200 {
		t.Errorf("HEAD jwks: %d", w.Code)
	}
	w, m = call(t, h, "GET", "/healthz", nil, false)
	if w.Code != 200 || m["status"] != "ok" {
		t.Fatalf("health: %d %v", w.Code, m)
	}
	failing = true
	w, m = call(t, h, "GET", "/healthz", nil, false)
	problemOf(t, w, m, 503, "store_unavailable")
	if w.Header().Get("Retry-After") != "1" {
		t.Errorf("a 503 says when to retry: %v", w.Header())
	}
}

// TestRoutesAnswerWhatIsNotThere: unknown paths, unclean paths and other
// methods are problems, never a redirect; the internal routes need the
// backend's credentials.
func TestRoutesAnswerWhatIsNotThere(t *testing.T) {
	h, _ := serve(t, "", nil)
	for _, p := range []string{"/v1/nothing", "/v1//otp/send", "/v1/otp/../otp/send", "/v1/otp/send/"} {
		w, m := call(t, h, "POST", p, map[string]string{}, false)
		problemOf(t, w, m, 404, "not_found")
	}
	w, m := call(t, h, "GET", "/v1/otp/send", nil, false)
	problemOf(t, w, m, 405, "method_not_allowed")
	if w.Header().Get("Allow") != "POST" {
		t.Errorf("Allow %q", w.Header().Get("Allow"))
	}
	w, m = call(t, h, "PUT", "/v1/blocks/account/ann", nil, true)
	problemOf(t, w, m, 405, "method_not_allowed")
	if w.Header().Get("Allow") != "GET, DELETE" {
		t.Errorf("Allow %q", w.Header().Get("Allow"))
	}
	for _, admin := range []string{"", "Bearer wrong", "Bearer " + adminToken + "x"} {
		w, m = call(t, h, "POST", "/v1/decisions", map[string]any{"action": "login", "subject": map[string]string{"account": "ann"}}, false, "Authorization", admin)
		problemOf(t, w, m, 401, "unauthorized")
	}
	// the scheme's name is case-insensitive; the token is not
	for admin, want := range map[string]int{"bearer " + adminToken: 200, "BEARER " + adminToken: 200, "Bearer  " + adminToken: 401, "Basic " + adminToken: 401, adminToken: 401} {
		w, m = call(t, h, "POST", "/v1/decisions", map[string]any{"action": "login", "subject": map[string]string{"account": "ann", "ip": "203.0.113.9"}}, false, "Authorization", admin)
		if w.Code != want {
			t.Errorf("Authorization %q: %d %v, want %d", strings.Replace(admin, adminToken, "<token>", 1), w.Code, m, want)
		}
	}
	routes := api.Routes()
	internal := 0
	for _, r := range routes {
		if r.Internal != (strings.HasPrefix(r.Path, "/v1/decisions") || strings.HasPrefix(r.Path, "/v1/outcomes") ||
			strings.HasPrefix(r.Path, "/v1/blocks/") || strings.HasPrefix(r.Path, "/v1/devices/")) {
			t.Errorf("route %+v", r)
		}
		if r.Internal {
			internal++
		}
	}
	if len(routes) != 12 || internal != 5 {
		t.Errorf("%d routes, %d internal", len(routes), internal)
	}
}

// TestCORS: a listed origin's preflight passes on the public routes and
// its requests get the headers a browser needs; any other origin's
// preflight, and any preflight of an internal route, is a 403.
func TestCORS(t *testing.T) {
	h, _ := serve(t, "network: {allowedOrigins: [\"https://app.example\"]}\n", nil)
	pre := func(path, origin string) *httptest.ResponseRecorder {
		w, _ := call(t, h, "OPTIONS", path, nil, false, "Origin", origin, "Access-Control-Request-Method", "POST")
		return w
	}
	w := pre("/v1/otp/send", "https://app.example")
	hd := w.Header()
	if w.Code != 204 || hd.Get("Access-Control-Allow-Origin") != "https://app.example" || hd.Get("Access-Control-Allow-Methods") != "GET, POST" ||
		hd.Get("Access-Control-Allow-Headers") != "Content-Type, X-Device-Token" || hd.Get("Access-Control-Allow-Credentials") != "true" ||
		hd.Get("Access-Control-Max-Age") != "600" || hd.Get("Vary") != "Origin" {
		t.Fatalf("an allowed preflight: %d %v", w.Code, hd)
	}
	for _, c := range []struct{ path, origin string }{
		{"/v1/otp/send", "https://evil.example"}, {"/v1/decisions", "https://app.example"}, {"/v1/outcomes", "https://app.example"},
		{"/v1/blocks/account/ann", "https://app.example"}, {"/v1/devices/ann", "https://app.example"},
	} {
		w := pre(c.path, c.origin)
		if w.Code != 403 || w.Header().Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight of %s from %s: %d %v", c.path, c.origin, w.Code, w.Header())
		}
	}
	w, _ = call(t, h, "GET", "/healthz", nil, false, "Origin", "https://app.example")
	if w.Code != 200 || w.Header().Get("Access-Control-Allow-Origin") != "https://app.example" || w.Header().Get("Access-Control-Expose-Headers") != "X-Device-Token, Retry-After" {
		t.Errorf("a request from the allowed origin: %d %v", w.Code, w.Header())
	}
	w, _ = call(t, h, "GET", "/healthz", nil, false, "Origin", "https://evil.example")
	if w.Code != 200 || w.Header().Get("Access-Control-Allow-Origin") != "" || w.Header().Get("Vary") != "Origin" {
		t.Errorf("a request from another origin is answered without the headers: %d %v", w.Code, w.Header())
	}
	w, _ = call(t, h, "OPTIONS", "/v1/otp/send", nil, false, "Origin", "https://app.example")
	if w.Header().Get("Access-Control-Allow-Max-Age") != "" || w.Code == 204 {
		t.Errorf("an OPTIONS without Access-Control-Request-Method is no preflight: %d %v", w.Code, w.Header())
	}
}

// TestDecisionsAndOutcomes: the backend's routes count, deny, describe
// the rule closest to its limit in the RateLimit headers, release leases,
// take failures and give a device token for a success.
func TestDecisionsAndOutcomes(t *testing.T) {
	h, _ := serve(t, `rules:
  - {name: per-account, action: login, key: [account], limit: 2, window: 1m}
  - {name: wide, action: login, key: [ip], limit: 50, window: 1h}
  - {name: shadowed, action: login, key: [ip], limit: 1, window: 1h, mode: shadow}
  - {name: failures, action: pin, key: [account], count: failures, limit: 2, window: 1h}
  - {name: one-at-a-time, action: export, key: [account], algorithm: concurrency, limit: 1, window: 1m}
  - {name: check, action: login, when: {purpose: risky}, key: [ip], limit: 1, window: 1h, mode: challenge}
`, nil)
	decide := func(body map[string]any) (*httptest.ResponseRecorder, map[string]any) {
		t.Helper()
		return call(t, h, "POST", "/v1/decisions", body, true)
	}
	login := map[string]any{"action": "login", "subject": map[string]string{"account": "ann", "ip": "203.0.113.9"}}
	w, m := decide(login)
	if w.Code != 200 || m["allowed"] != true || m["deniedBy"] != "" || m["retryAfter"] != float64(0) {
		t.Fatalf("first: %d %v", w.Code, m)
	}
	if w.Header().Get("RateLimit-Policy") != `"per-account";q=2;w=60` || w.Header().Get("RateLimit") != `"per-account";r=1;t=60` {
		t.Errorf("headers of the rule closest to its limit (not the shadow one): %v", w.Header())
	}
	rules, _ := m["rules"].([]any)
	if len(rules) != 3 {
		t.Fatalf("rules %v", rules)
	}
	if r0, _ := rules[0].(map[string]any); r0["name"] != "per-account" || r0["remaining"] != float64(1) || r0["resetAfter"] != float64(60) || r0["allowed"] != true {
		t.Errorf("rule 0: %v", r0)
	}
	decide(login)
	w, m = decide(login)
	if w.Code != 200 || m["allowed"] != false || m["deniedBy"] != "per-account" {
		t.Fatalf("third: %d %v", w.Code, m)
	}
	if ra, _ := m["retryAfter"].(float64); ra < 1 || ra > 60 {
		t.Errorf("retryAfter %v", m["retryAfter"])
	}

	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"action": "nothing", "subject": map[string]string{"account": "ann"}}, "action"},
		{map[string]any{"action": "login", "subject": map[string]string{"email": "a@example.com", "phone": "+14155550100"}}, "subject"},
		{map[string]any{"action": "login", "subject": map[string]string{"device": "abc"}}, "subject.device"},
		{map[string]any{"action": "login", "subject": map[string]string{"account": "ann", "device": strings.Repeat("a", 5000)}}, "subject.device"},
		{map[string]any{"action": "login", "subject": map[string]string{"ip": "300.1.1.1"}}, "subject.ip"},
		{map[string]any{"action": "login", "subject": map[string]string{"email": "nope"}}, "subject.email"},
		{map[string]any{"action": "login", "subject": map[string]string{"phone": "12"}}, "subject.phone"},
		{map[string]any{"action": "login", "subject": map[string]string{"account": "ann"}, "attributes": map[string]string{"color": "red"}}, "attributes.color"},
		{map[string]any{"action": "login", "subject": map[string]string{"email": "a@example.com"}, "attributes": map[string]string{"channel": "sms"}}, "attributes.channel"},
	} {
		w, m := decide(c.body)
		problemOf(t, w, m, 400, "invalid_request")
		if _, ok := errorsOf(m)[c.field]; !ok || len(errorsOf(m)) != 1 {
			t.Errorf("%v: errors %v, want only %s", c.body, errorsOf(m), c.field)
		}
	}
	w, m = decide(map[string]any{"action": "login", "subject": map[string]string{"account": "eve", "ip": "203.0.113.12", "email": "a@example.com"}, "attributes": map[string]string{"channel": "email", "purpose": "login"}})
	if w.Code != 200 {
		t.Errorf("the channel the subject has and a purpose: %d %v", w.Code, m)
	}

	// a concurrency lease, released
	export := map[string]any{"action": "export", "subject": map[string]string{"account": "ann"}}
	_, m = decide(export)
	lease, _ := m["lease"].(string)
	if m["allowed"] != true || lease == "" {
		t.Fatalf("a lease: %v", m)
	}
	if _, m = decide(export); m["allowed"] != false || m["lease"] != nil {
		t.Fatalf("a second while the first runs: denied, and holding no lease: %v", m)
	}
	release := map[string]any{"action": "export", "subject": map[string]string{"account": "ann"}, "release": lease}
	if w, m = decide(release); w.Code != 200 || m["released"] != true {
		t.Fatalf("release: %d %v", w.Code, m)
	}
	if _, m = decide(export); m["allowed"] != true {
		t.Errorf("after the release: %v", m)
	}

	// a challenge rule flags (a login: a step-up code)
	risky := map[string]any{"action": "login", "subject": map[string]string{"account": "dan", "ip": "203.0.113.10"}, "attributes": map[string]string{"purpose": "risky"}}
	if _, m = decide(risky); m["allowed"] != true || m["challenge"] != nil {
		t.Errorf("the rule's first: %v", m)
	}
	if _, m = decide(risky); m["allowed"] != true || m["challenge"] != "otp" || m["challengedBy"] != "check" {
		t.Errorf("a challenged signup: %v", m)
	}

	// outcomes
	outcome := func(body map[string]any) (*httptest.ResponseRecorder, map[string]any) {
		t.Helper()
		return call(t, h, "POST", "/v1/outcomes", body, true)
	}
	bob := map[string]string{"account": "bob", "ip": "203.0.113.11"}
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"action": "pin", "subject": bob, "outcome": "maybe"}, "outcome"},
		{map[string]any{"action": "pin", "subject": bob, "outcome": ""}, "outcome"},
		{map[string]any{"action": "pin", "subject": bob, "outcome": "failure", "issueDevice": true}, "issueDevice"},
		{map[string]any{"action": "pin", "subject": map[string]string{"ip": "203.0.113.11"}, "outcome": "success", "issueDevice": true}, "issueDevice"},
		{map[string]any{"action": "pin", "subject": bob, "outcome": "success", "issueDevice": "yes"}, "issueDevice"},
	} {
		w, m := outcome(c.body)
		problemOf(t, w, m, 400, "invalid_request")
		if _, ok := errorsOf(m)[c.field]; !ok || len(errorsOf(m)) != 1 {
			t.Errorf("%v: errors %v, want only %s", c.body, errorsOf(m), c.field)
		}
	}
	for i := range 2 {
		if _, m := decide(map[string]any{"action": "pin", "subject": bob}); m["allowed"] != true {
			t.Fatalf("attempt %d: %v", i+1, m)
		}
		if w, _ := outcome(map[string]any{"action": "pin", "subject": bob, "outcome": "failure"}); w.Code != 204 || w.Header().Get("Cache-Control") != "no-store" {
			t.Fatalf("failure %d: %d", i+1, w.Code)
		}
	}
	if _, m = decide(map[string]any{"action": "pin", "subject": bob}); m["allowed"] != false || m["deniedBy"] != "failures" {
		t.Errorf("after two failures: %v", m)
	}
	w, m = outcome(map[string]any{"action": "pin", "subject": bob, "outcome": "success", "issueDevice": true})
	if tok, _ := m["deviceToken"].(string); w.Code != 200 || tok == "" || w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("a success with a device: %d %v", w.Code, m)
	}
}

// TestBlocks: an administrator reads a subject's state per rule and
// clears it; the dimensions with a slash have a spelling without one.
func TestBlocks(t *testing.T) {
	h, _ := serve(t, `rules:
  - {name: per-account, action: login, key: [account], limit: 2, window: 1m}
  - {name: per-ip16, action: login, key: [ip/16], limit: 3, window: 1h}
  - {name: locks, action: reset, key: [account], count: failures, limit: 1, window: 1h, lockout: {initial: 10m, factor: 2, max: 1h}}
`, nil)
	for range 3 {
		call(t, h, "POST", "/v1/decisions", map[string]any{"action": "login", "subject": map[string]string{"account": "ann", "ip": "203.0.113.9"}}, true)
	}
	state := func(path string) map[string]map[string]any {
		t.Helper()
		w, m := call(t, h, "GET", path, nil, true)
		if w.Code != 200 {
			t.Fatalf("GET %s: %d %v", path, w.Code, m)
		}
		out := map[string]map[string]any{}
		rules, _ := m["rules"].([]any)
		for _, r := range rules {
			x, _ := r.(map[string]any)
			out[x["name"].(string)] = x
		}
		return out
	}
	st := state("/v1/blocks/account/ann")
	if st["per-account"]["remaining"] != float64(0) || len(st) != 2 {
		t.Fatalf("ann: %v", st)
	}
	if ra, _ := st["per-account"]["resetAfter"].(float64); ra < 1 || ra > 60 {
		t.Errorf("resetAfter %v", st["per-account"])
	}
	for _, p := range []string{"/v1/blocks/ip16/203.0.1.1", "/v1/blocks/ip%2F16/203.0.1.1"} {
		if st := state(p); st["per-ip16"]["remaining"] != float64(1) || len(st) != 1 {
			t.Errorf("%s: %v", p, st)
		}
	}
	if w, _ := call(t, h, "DELETE", "/v1/blocks/account/ann", nil, true); w.Code != 204 || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("unblock: %d", w.Code)
	}
	if st := state("/v1/blocks/account/ann"); st["per-account"]["remaining"] != float64(2) {
		t.Errorf("after the unblock: %v", st)
	}
	w, m := call(t, h, "GET", "/v1/blocks/ip/not-an-ip", nil, true)
	problemOf(t, w, m, 400, "invalid_request")
	if _, ok := errorsOf(m)["value"]; !ok {
		t.Errorf("errors %v", errorsOf(m))
	}

	// a lockout, read and cleared
	cat := map[string]string{"account": "cat", "ip": "192.0.2.1"}
	call(t, h, "POST", "/v1/decisions", map[string]any{"action": "reset", "subject": cat}, true)
	call(t, h, "POST", "/v1/outcomes", map[string]any{"action": "reset", "subject": cat, "outcome": "failure"}, true)
	if _, m := call(t, h, "POST", "/v1/decisions", map[string]any{"action": "reset", "subject": cat}, true); m["allowed"] != false {
		t.Fatalf("past the failures: %v", m)
	}
	if st := state("/v1/blocks/account/cat"); st["locks"]["locked"] != true || st["locks"]["lockedFor"].(float64) < 1 || st["locks"]["lockedFor"].(float64) > 600 {
		t.Errorf("a lockout: %v", st)
	}
	call(t, h, "DELETE", "/v1/blocks/account/cat", nil, true)
	if st := state("/v1/blocks/account/cat"); st["locks"]["locked"] != false {
		t.Errorf("after the unblock: %v", st)
	}
}

// TestWhileRedisFails: a rule with onStoreError deny answers 503 (nothing
// sent, no code checked), one with allow is decided by the in-process
// backstop; the internal routes answer 503; health says so. Nothing is a
// 500.
func TestWhileRedisFails(t *testing.T) {
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	h, out := serveOn(t, srv, `rules:
  - {name: sends, action: otp.send, key: [destination], limit: 5, window: 1h, onStoreError: deny}
  - {name: logins, action: login, key: [account], limit: 1, window: 1h, onStoreError: allow}
`, nil)
	login := map[string]string{"username": "ann@example.com", "password": "correct horse battery staple"}
	if w, m := call(t, h, "POST", "/v1/login", login, false); w.Code != 200 {
		t.Fatalf("a login while Redis answers: %d %v", w.Code, m)
	}
	srv.Close()
	w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"to": "ann@example.com", "channel": "email", "purpose": "login"}, false)
	problemOf(t, w, m, 503, "store_unavailable")
	if len(out.msgs) != 0 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("a send while Redis fails: %d messages, %v", len(out.msgs), w.Header())
	}
	// the backstop counts from what Redis last said: the hour's login
	// was spent
	w, m = call(t, h, "POST", "/v1/login", login, false)
	problemOf(t, w, m, 429, "rate_limited")
	if m["rule"] != "logins" {
		t.Errorf("the backstop's denial: %v", m)
	}
	w, m = call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": "ann@example.com", "purpose": "login", "code": "123456"}, false)
	if w.Code != 503 {
		t.Errorf("a verify while Redis fails: %d %v", w.Code, m)
	}
	for _, c := range []struct{ method, path string }{{"GET", "/v1/blocks/account/ann"}, {"DELETE", "/v1/blocks/account/ann"}, {"DELETE", "/v1/devices/ann"}} {
		w, m := call(t, h, c.method, c.path, nil, true)
		problemOf(t, w, m, 503, "store_unavailable")
	}
	// no rule counts failures: an outcome has nothing to write
	if w, m := call(t, h, "POST", "/v1/outcomes", map[string]any{"action": "login", "subject": map[string]string{"account": "ann"}, "outcome": "failure"}, true); w.Code != 204 {
		t.Errorf("an outcome with nothing to settle: %d %v", w.Code, m)
	}
	w, m = call(t, h, "GET", "/healthz", nil, false)
	problemOf(t, w, m, 503, "store_unavailable")
}

// placesSender is a Roomer that counts the places it gave and has not
// had back.
type placesSender struct {
	outbox
	given, held atomic.Int32
}

func (p *placesSender) Room(context.Context, message.Channel) (func(), error) {
	p.given.Add(1)
	p.held.Add(1)
	var once sync.Once
	return func() { once.Do(func() { p.held.Add(-1) }) }, nil
}

// TestASendGivesItsQueuePlaceBackWhenItSendsNothing: a send that took a
// place in the queue and then failed to store its code (Redis down, the
// rule's onStoreError allow) gives the place back, as a send that was
// queued does: a place kept would count in the in-process queue's depth
// for good.
func TestASendGivesItsQueuePlaceBackWhenItSendsNothing(t *testing.T) {
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	p := &placesSender{}
	h, _ := serveOn(t, srv, `rules:
  - {name: sends, action: otp.send, key: [destination], limit: 5, window: 1h, onStoreError: allow}
`, func(s *app.Settings) {
		s.Senders = func(queue.Host) (message.Sender, error) { return p, nil }
	})
	send := map[string]string{"to": "ann@example.com", "channel": "email", "purpose": "login"}
	if w, m := call(t, h, "POST", "/v1/otp/send", send, false); w.Code != 202 || p.given.Load() != 1 || p.held.Load() != 0 {
		t.Fatalf("a send: %d %v; %d places given, %d held after it", w.Code, m, p.given.Load(), p.held.Load())
	}
	srv.Close()
	w, m := call(t, h, "POST", "/v1/otp/send", send, false)
	problemOf(t, w, m, 503, "store_unavailable")
	if p.given.Load() != 2 || p.held.Load() != 0 {
		t.Fatalf("a send whose code was not stored: %d places given, %d held after it", p.given.Load(), p.held.Load())
	}
}
