package app_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// The API's part of "Redis is the truth": outcomes that outlive the
// request, and budgets given back when a failure is not the user's. Each
// test failed on the reviewed code.

// auth is an authenticator the test steers.
type auth struct {
	mu         sync.Mutex
	login      func(ctx context.Context) error
	signup     error
	attributes map[string]string
	signups    int    // accounts made
	verified   string // the verified email a login answers, if any
}

func (a *auth) Login(ctx context.Context, _ authn.Login) (authn.LoginResult, error) {
	a.mu.Lock()
	f := a.login
	a.mu.Unlock()
	if err := f(ctx); err != nil {
		return authn.LoginResult{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return authn.LoginResult{Fields: map[string]any{"ok": true}, VerifiedEmail: a.verified}, nil
}

func (a *auth) SignUp(_ context.Context, s authn.SignUp) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attributes = s.Attributes
	if a.signup == nil {
		a.signups++
	}
	return a.signup
}

// sender fails while failing is set.
type sender struct {
	mu      sync.Mutex
	failing error
	sent    int
}

func (s *sender) Send(context.Context, message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing != nil {
		return s.failing
	}
	s.sent++
	return nil
}

type harness struct {
	app *app.App
	a   *auth
	s   *sender
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{a: &auth{login: func(context.Context) error { return nil }}, s: &sender{}}
	h.app = startApp(t, app.Settings{Auth: h.a, Senders: func(queue.Host) (message.Sender, error) { return h.s, nil }})
	return h
}

// startApp is the composed server of s on a redis-server of its own, with
// the default configuration behind the trusted proxies 192.0.2.0/24 and a
// store timeout of 10s; the test closes it.
func startApp(t *testing.T, s app.Settings) *app.App {
	t.Helper()
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	_, key, _ := ed25519.GenerateKey(nil)
	cfg, err := config.Parse([]byte("network: {trustedProxies: [192.0.2.0/24]}\nstore: {timeout: 10s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s.Redis, s.Secret = rdb, []byte("0123456789abcdef0123")
	a, err := app.New(context.Background(), s, cfg, app.Keys{Signing: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func (h *harness) post(ctx context.Context, path, body, ip string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = "192.0.2.1:4000"
	r.Header.Set("X-Forwarded-For", ip)
	w := httptest.NewRecorder()
	h.app.ServeHTTP(w, r)
	return w
}

// remaining is what a rule keyed on dimension alone has left for value.
func (h *harness) remaining(t *testing.T, dim, value, rule string) int64 {
	t.Helper()
	cfg := config.Default()
	s, err := identity.ParseDimension(dim, value, cfg.OTP.SMS.Policy())
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.app.Guard().Status(context.Background(), dim, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range st {
		if x.Rule == rule {
			return x.Remaining
		}
	}
	t.Fatalf("no rule %s on %s", rule, dim)
	return 0
}

// TestOutcomesOutliveTheRequest: the client hangs up (net/http cancels
// the request's context) after the password was checked: the success
// still gives its attempt back. The reviewed code settled with the
// request's context, and the attempt stayed a failure.
func TestOutcomesOutliveTheRequest(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	h.a.login = func(context.Context) error { cancel(); return nil } // the client is gone when the password is right
	h.post(ctx, "/v1/login", `{"username":"gone@example.com","password":"right password here"}`, "198.51.100.7")
	if got := h.remaining(t, "account", "gone@example.com", "login-per-device"); got != 20 {
		t.Fatalf("after a success whose client hung up, login-per-device has %d of 20 left: the attempt stayed a failure", got)
	}
}

// TestBudgetsAreNotSpentOnFailuresThatAreNotTheUsers: sends that the
// provider fails (an SMS or SES outage), and signups the authenticator
// cannot answer or refuses, give back what they took: once the provider
// or authenticator recovers, the user's budget is whole. The reviewed code
// kept every unit: two failed sends used up a minute's budget, three
// failed signups a day's.
func TestBudgetsAreNotSpentOnFailuresThatAreNotTheUsers(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	send := `{"channel":"sms","to":"+14155550123","purpose":"login"}`
	h.s.failing = fmt.Errorf("%w: throttled", message.ErrUnavailable)
	for i := range 6 {
		if w := h.post(ctx, "/v1/otp/send", send, "198.51.100.8"); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("send %d with the provider down: %d %s", i, w.Code, w.Body)
		}
	}
	h.s.failing = nil
	if w := h.post(ctx, "/v1/otp/send", send, "198.51.100.8"); w.Code != http.StatusAccepted {
		t.Fatalf("the first send once the provider recovered: %d %s", w.Code, w.Body)
	}
	if got := h.remaining(t, "global", "", "sms-global"); got != 4999 {
		t.Errorf("sms-global has %d of 5000 left after one message sent: the failed sends were counted", got)
	}

	signup := `{"email":"new@example.com","password":"a long enough passphrase"}`
	for _, fail := range []error{authn.ErrUnavailable, authn.ErrUnavailable, fmt.Errorf("%w: its password policy", authn.ErrRejected), authn.ErrUnavailable} {
		h.a.signup = fail
		if w := h.post(ctx, "/v1/signup", signup, "198.51.100.9"); w.Code == http.StatusAccepted || w.Code == http.StatusTooManyRequests {
			t.Fatalf("signup with the authenticator failing (%v): %d", fail, w.Code)
		}
	}
	h.a.signup = nil
	if w := h.post(ctx, "/v1/signup", signup, "198.51.100.9"); w.Code != http.StatusAccepted {
		t.Fatalf("the signup once the authenticator recovered: %d %s", w.Code, w.Body)
	}
}

// TestSignupAttributesAreAllowListed: only signup.attributes reach the
// authenticator; email_verified or a custom: attribute is a 400.
func TestSignupAttributesAreAllowListed(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, attr := range []string{"email_verified", "custom:role", "phone_number_verified"} {
		w := h.post(ctx, "/v1/signup", `{"email":"attr@example.com","password":"a long enough passphrase","attributes":{"`+attr+`":"true"}}`, "198.51.100.10")
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "attributes."+attr) {
			t.Errorf("%s: %d %s", attr, w.Code, w.Body)
		}
	}
	if w := h.post(ctx, "/v1/signup", `{"email":"attr@example.com","password":"a long enough passphrase","attributes":{"name":"Ann"}}`, "198.51.100.10"); w.Code != http.StatusAccepted || h.a.attributes["name"] != "Ann" {
		t.Errorf("name: %d %s %v", w.Code, w.Body, h.a.attributes)
	}
}
