package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/internal/app"
)

// TestLoginAnswers: a login's fields are checked before the store; a
// wrong password is a 401 that counts as a failure; the right one signs a
// password token for the account and gives it a device token; a
// deployment without an authenticator answers 503.
func TestLoginAnswers(t *testing.T) {
	h, _ := serve(t, "rules:\n  - {name: fails, action: login, key: [account], count: failures, limit: 2, window: 1h}\n", nil)
	for _, c := range []struct {
		body  map[string]string
		field string
		want  string
	}{
		{map[string]string{"username": "", "password": "x"}, "username", ""},
		{map[string]string{"username": "ann@example.com", "password": ""}, "password", "required"},
		{map[string]string{"username": "ann@example.com", "password": strings.Repeat("é", 257)}, "password", "must be at most 256 characters"},
	} {
		w, m := call(t, h, "POST", "/v1/login", c.body, false)
		problemOf(t, w, m, 400, "invalid_request")
		got, ok := errorsOf(m)[c.field].(string)
		if !ok || (c.want != "" && got != c.want) || len(errorsOf(m)) != 1 {
			t.Errorf("%v: errors %v, want only %s: %q", c.body, errorsOf(m), c.field, c.want)
		}
	}
	// 256 characters (of two bytes each) is a password, wrong
	w, m := call(t, h, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": strings.Repeat("é", 256)}, false)
	problemOf(t, w, m, 401, "invalid_credentials")
	w, m = call(t, h, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": "correct horse battery staple"}, false)
	if w.Code != 200 || m["status"] != "authenticated" || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("the right password: %d %v", w.Code, m)
	}
	claims := jwtClaims(t, m["token"])
	if claims["sub"] != "ann@example.com" || claims["purpose"] != "login" {
		t.Errorf("claims %v", claims)
	}
	if dt, _ := m["deviceToken"].(string); dt == "" {
		t.Errorf("no device token: %v", m)
	}
	// the success gave its own attempt back, not the earlier failure's:
	// one more wrong password fills the failures rule
	for i, want := range []int{401, 429} {
		if w, _ := call(t, h, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": "wrong wrong wrong"}, false); w.Code != want {
			t.Fatalf("wrong password %d: %d, want %d", i+1, w.Code, want)
		}
	}

	none, _ := serve(t, "", func(s *app.Settings) { s.Auth = nil })
	w, m = call(t, none, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": "correct horse battery staple"}, false)
	problemOf(t, w, m, 503, "upstream_unavailable")
	w, m = call(t, none, "POST", "/v1/signup", map[string]string{"email": "new@example.com", "password": "a long enough passphrase"}, false)
	problemOf(t, w, m, 503, "upstream_unavailable")
}

// TestSignupAnswers: a signup's fields are checked (the password policy,
// the attributes allowed); every accepted signup answers the same 202
// and sends a code, for a new address or a registered one; the code
// confirms the account, which then logs in.
func TestSignupAnswers(t *testing.T) {
	h, out := serve(t, "", nil)
	const pw = "a long enough passphrase"
	for _, c := range []struct {
		body  map[string]any
		field string
		want  string
	}{
		{map[string]any{"email": "nope", "password": pw}, "email", ""},
		{map[string]any{"email": "new@example.com", "password": "short"}, "password", "must be at least 8 characters"},
		{map[string]any{"email": "new@example.com", "password": "password123"}, "password", "is one of the most common passwords; choose another"},
		{map[string]any{"email": "new@example.com", "password": pw, "attributes": map[string]string{"bad name": "x"}}, "attributes.bad name", "attribute names are letters, digits, '_', '-' and ':', at most 64"},
		{map[string]any{"email": "new@example.com", "password": pw, "attributes": map[string]string{strings.Repeat("a", 65): "x"}}, "attributes." + strings.Repeat("a", 65), "attribute names are letters, digits, '_', '-' and ':', at most 64"},
		{map[string]any{"email": "new@example.com", "password": pw, "attributes": map[string]string{strings.Repeat("a", 64): "x"}}, "attributes." + strings.Repeat("a", 64), "not accepted at signup (signup.attributes: name, given_name, family_name, locale, zoneinfo)"},
		{map[string]any{"email": "new@example.com", "password": pw, "attributes": map[string]string{"az:AZ_09-x": "x"}}, "attributes.az:AZ_09-x", "not accepted at signup (signup.attributes: name, given_name, family_name, locale, zoneinfo)"},
		{map[string]any{"email": "new@example.com", "password": pw, "attributes": map[string]string{"nickname": "x"}}, "attributes.nickname", "not accepted at signup (signup.attributes: name, given_name, family_name, locale, zoneinfo)"},
		{map[string]any{"email": "new@example.com", "password": pw, "attributes": map[string]string{"name": strings.Repeat("n", 2049)}}, "attributes.name", "must be at most 2048 characters"},
	} {
		w, m := call(t, h, "POST", "/v1/signup", c.body, false)
		problemOf(t, w, m, 400, "invalid_request")
		got, ok := errorsOf(m)[c.field].(string)
		if !ok || (c.want != "" && got != c.want) || len(errorsOf(m)) != 1 {
			t.Errorf("%v: errors %v, want only %s: %q", c.body, errorsOf(m), c.field, c.want)
		}
	}
	if len(out.msgs) != 0 {
		t.Fatalf("a refused signup sent %d messages", len(out.msgs))
	}
	attrs := map[string]string{"name": strings.Repeat("n", 2048), "locale": "fr-CA"}
	for i, email := range []string{"new@example.com", "ann@example.com"} {
		w, m := call(t, h, "POST", "/v1/signup", map[string]any{"email": email, "password": pw, "attributes": attrs}, false)
		if w.Code != 202 || m["status"] != "pending" || len(m) != 1 {
			t.Fatalf("signup of %s: %d %v", email, w.Code, m)
		}
		if len(out.msgs) != i+1 {
			t.Fatalf("signup of %s: %d messages", email, len(out.msgs))
		}
		if msg := out.last(t); msg.To != email || msg.Purpose != "signup" || len(msg.Code) != 6 || msg.Slot == "" {
			t.Errorf("the signup code: %+v", msg)
		}
	}
	code := out.msgs[0].Code
	login := map[string]string{"username": "new@example.com", "password": pw}
	if w, _ := call(t, h, "POST", "/v1/login", login, false); w.Code != 401 {
		t.Fatalf("an unconfirmed account logs in: %d", w.Code)
	}
	if w, m := call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": "new@example.com", "purpose": "signup", "code": code}, false); w.Code != 200 {
		t.Fatalf("the signup code: %d %v", w.Code, m)
	}
	if w, m := call(t, h, "POST", "/v1/login", login, false); w.Code != 200 || m["status"] != "authenticated" {
		t.Errorf("the confirmed account: %d %v", w.Code, m)
	}
	// a registered account keeps its password
	if w, _ := call(t, h, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": pw}, false); w.Code != 401 {
		t.Errorf("a signup changed a confirmed account's password: %d", w.Code)
	}
}

// TestStepUpAnswers: a challenged login with the right password gets a
// session and a code at the account's verified address (masked in the
// answer); the session's fields are checked; a wrong code, an unknown or
// malformed session and a replay are 401s; the right code answers as the
// login would have, once. Without a way to send, the rule's fallback
// decides; the login.stepup rules bound the codes.
func TestStepUpAnswers(t *testing.T) {
	const rule = "  - {name: stepup, action: login, key: [global], limit: 1, window: 1h, mode: challenge}\n"
	h, out := serve(t, "rules:\n"+rule, nil)
	login := map[string]string{"username": "ann@example.com", "password": "correct horse battery staple"}
	if w, m := call(t, h, "POST", "/v1/login", login, false); w.Code != 200 || m["status"] != "authenticated" {
		t.Fatalf("the first login: %d %v", w.Code, m)
	}
	if w, m := call(t, h, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": "wrong wrong wrong"}, false); w.Code != 401 || len(out.msgs) != 0 {
		t.Fatalf("a wrong password is no challenge: %d %v, %d messages", w.Code, m, len(out.msgs))
	}
	w, m := call(t, h, "POST", "/v1/login", login, false)
	session, _ := m["session"].(string)
	if w.Code != 200 || m["status"] != "challenge" || m["challengeName"] != "EMAIL_OTP" || m["to"] != "a***@example.com" || len(session) != 22 {
		t.Fatalf("a challenged login: %d %v", w.Code, m)
	}
	code := out.last(t).Code
	for _, c := range []struct {
		body   map[string]string
		fields []string
	}{
		{map[string]string{"session": "", "code": code}, []string{"session"}},
		{map[string]string{"session": session, "code": "12345"}, []string{"code"}},
		{map[string]string{"session": "", "code": "x"}, []string{"session", "code"}},
	} {
		w, m := call(t, h, "POST", "/v1/login/challenge", c.body, false)
		problemOf(t, w, m, 400, "invalid_request")
		if len(errorsOf(m)) != len(c.fields) {
			t.Errorf("%v: errors %v, want %v", c.body, errorsOf(m), c.fields)
		}
		for _, f := range c.fields {
			if _, ok := errorsOf(m)[f]; !ok {
				t.Errorf("%v: errors %v, want %v", c.body, errorsOf(m), c.fields)
			}
		}
	}
	wrong := "000000"
	if code == wrong {
		wrong = "000001"
	}
	for _, body := range []map[string]string{
		{"session": session, "code": wrong},
		{"session": session[:21], "code": code},
		{"session": session + "A", "code": code},
		{"session": strings.Repeat("A", 22), "code": code},
	} {
		w, m := call(t, h, "POST", "/v1/login/challenge", body, false)
		problemOf(t, w, m, 401, "invalid_credentials")
	}
	w, m = call(t, h, "POST", "/v1/login/challenge", map[string]string{"session": session, "code": code}, false)
	if w.Code != 200 || m["status"] != "authenticated" || jwtClaims(t, m["token"])["sub"] != "ann@example.com" {
		t.Fatalf("the right code: %d %v", w.Code, m)
	}
	if dt, _ := m["deviceToken"].(string); dt == "" {
		t.Errorf("no device token: %v", m)
	}
	w, m = call(t, h, "POST", "/v1/login/challenge", map[string]string{"session": session, "code": code}, false)
	problemOf(t, w, m, 401, "invalid_credentials")

	// no way to send: the fallback decides
	for _, c := range []struct {
		fallback string
		status   int
	}{{"deny", 429}, {"allow", 200}} {
		h, _ := serve(t, "rules:\n  - {name: stepup, action: login, key: [global], limit: 1, window: 1h, mode: challenge, fallback: "+c.fallback+"}\n",
			func(s *app.Settings) { s.Senders = nil })
		call(t, h, "POST", "/v1/login", login, false)
		w, m := call(t, h, "POST", "/v1/login", login, false)
		if w.Code != c.status {
			t.Errorf("fallback %s without a sender: %d %v", c.fallback, w.Code, m)
		}
		if c.status == 429 && (m["rule"] != "stepup" || w.Header().Get("Retry-After") == "") {
			t.Errorf("fallback deny: %v %v", m, w.Header())
		}
	}

	// at most one step-up code an hour for the account
	h, out = serve(t, "rules:\n"+rule+"  - {name: codes, action: login.stepup, key: [account], limit: 1, window: 1h}\n", nil)
	call(t, h, "POST", "/v1/login", login, false)
	if w, m := call(t, h, "POST", "/v1/login", login, false); w.Code != 200 || m["status"] != "challenge" {
		t.Fatalf("the first challenge: %d %v", w.Code, m)
	}
	w, m = call(t, h, "POST", "/v1/login", login, false)
	problemOf(t, w, m, 429, "rate_limited")
	if m["rule"] != "codes" || len(out.msgs) != 1 {
		t.Errorf("the second challenge within the hour: %v, %d messages", m, len(out.msgs))
	}
}

// authenticator answers every login with result (or err) and every
// signup with signupErr; it keeps what it was given.
type authenticator struct {
	result    authn.LoginResult
	err       error
	signupErr error
	logins    []authn.Login
}

func (a *authenticator) Login(_ context.Context, l authn.Login) (authn.LoginResult, error) {
	a.logins = append(a.logins, l)
	return a.result, a.err
}

func (a *authenticator) SignUp(context.Context, authn.SignUp) error { return a.signupErr }

// TestLoginRelaysTheAuthenticator: what an authenticator answers is what
// the client gets: the app's own answer relayed (status, type, cookies,
// body; the device token in a header on a success only), its challenge,
// its fields with the device token; an outage is a 503 that counts
// nothing, a refused signup a 400 naming why.
func TestLoginRelaysTheAuthenticator(t *testing.T) {
	auth := &authenticator{}
	h, _ := serve(t, "rules:\n  - {name: fails, action: login, key: [account], count: failures, limit: 1, window: 1h}\n", func(s *app.Settings) { s.Auth = auth })
	login := func() *httptest.ResponseRecorder {
		t.Helper()
		r := httptest.NewRequest("POST", "/v1/login", strings.NewReader(`{"username":"Ann","password":"pw"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("User-Agent", "test-agent/1")
		r.RemoteAddr = "198.51.100.7:4000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	auth.result = authn.LoginResult{Passthrough: &authn.Passthrough{Status: 200, ContentType: "text/plain", Body: []byte("welcome"), Cookies: []string{"sid=1", "theme=dark"}}}
	w := login()
	if w.Code != 200 || w.Body.String() != "welcome" || w.Header().Get("Content-Type") != "text/plain" || len(w.Header().Values("Set-Cookie")) != 3 ||
		w.Header().Get("X-Device-Token") == "" || w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("a relayed success: %d %v %q", w.Code, w.Header(), w.Body)
	}
	l := auth.logins[0]
	if l.Account != "ann" || l.Username != "Ann" || l.Password != "pw" || l.ClientIP.String() != "198.51.100.7" || l.UserAgent != "test-agent/1" ||
		string(l.Body) != `{"username":"Ann","password":"pw"}` {
		t.Errorf("what the authenticator was given: %+v", l)
	}
	auth.result = authn.LoginResult{Passthrough: &authn.Passthrough{Status: 300, Body: []byte("elsewhere")}}
	if w := login(); w.Code != 300 || w.Header().Get("X-Device-Token") != "" || len(w.Header().Values("Set-Cookie")) != 0 {
		t.Errorf("a relayed redirect gets no device: %d %v", w.Code, w.Header())
	}
	auth.result = authn.LoginResult{Challenge: &authn.Challenge{Name: "SOFTWARE_TOKEN_MFA", Session: "s-1"}}
	w = login()
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	if w.Code != 200 || m["status"] != "challenge" || m["challengeName"] != "SOFTWARE_TOKEN_MFA" || m["session"] != "s-1" || len(m) != 3 {
		t.Errorf("the authenticator's challenge: %d %v", w.Code, m)
	}
	auth.result = authn.LoginResult{Fields: map[string]any{"authenticationResult": map[string]any{"IdToken": "x"}}}
	w = login()
	m = nil
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	if dt, _ := m["deviceToken"].(string); w.Code != 200 || m["status"] != "authenticated" || m["authenticationResult"] == nil || dt == "" {
		t.Errorf("the authenticator's fields: %d %v", w.Code, m)
	}

	// an outage counts nothing: the failures rule still has its unit
	auth.err = authn.ErrUnavailable
	w = login()
	if w.Code != 503 {
		t.Fatalf("an outage: %d %s", w.Code, w.Body)
	}
	auth.err = authn.ErrInvalidCredentials
	if w := login(); w.Code != 401 {
		t.Errorf("a wrong password after the outage: %d", w.Code)
	}
	if w := login(); w.Code != 429 {
		t.Errorf("the second wrong password: %d", w.Code)
	}

	auth.signupErr = fmt.Errorf("%w: the password is too simple", authn.ErrRejected)
	w2, m2 := call(t, h, "POST", "/v1/signup", map[string]string{"email": "new@example.com", "password": "a long enough passphrase"}, false)
	problemOf(t, w2, m2, 400, "invalid_request")
	if errorsOf(m2)["body"] != "the authenticator refuses this signup: the password is too simple" {
		t.Errorf("a refused signup: %v", m2)
	}
	auth.signupErr = errors.New("down")
	w2, m2 = call(t, h, "POST", "/v1/signup", map[string]string{"email": "new@example.com", "password": "a long enough passphrase"}, false)
	problemOf(t, w2, m2, 503, "upstream_unavailable")
}

// TestAStrangerOnTheOwnersAddressCannotLockOutItsTrustedDevice: under the
// default rules, five wrong passwords from a stranger behind the owner's
// address (a shared NAT) lock that address's untrusted clients out of
// the account, never the owner's trusted device (found by an outside
// probe: the pair rule refused it with the right password).
func TestAStrangerOnTheOwnersAddressCannotLockOutItsTrustedDevice(t *testing.T) {
	h, _ := serve(t, "", nil)
	right := map[string]string{"username": "ann@example.com", "password": "correct horse battery staple"}
	w, m := call(t, h, "POST", "/v1/login", right, false)
	device, _ := m["deviceToken"].(string)
	if w.Code != 200 || device == "" {
		t.Fatalf("the owner's first login: %d %v", w.Code, m)
	}
	for i := range 6 {
		w, _ := call(t, h, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": "a stranger's guess " + strconv.Itoa(i)}, false)
		if want := map[bool]int{true: 401, false: 429}[i < 5]; w.Code != want {
			t.Fatalf("the stranger's guess %d: %d, want %d", i+1, w.Code, want)
		}
	}
	if w, m := call(t, h, "POST", "/v1/login", right, false); w.Code != 429 || m["rule"] != "login-per-account-ip" {
		t.Errorf("an untrusted client of that address: %d %v", w.Code, m)
	}
	if w, m := call(t, h, "POST", "/v1/login", right, false, "X-Device-Token", device); w.Code != 200 || m["status"] != "authenticated" {
		t.Errorf("the owner's trusted device: %d %v", w.Code, m)
	}
}
