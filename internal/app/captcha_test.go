package app_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// A CAPTCHA is a proof: what a hang-up, a failing provider or a failing
// Redis do to it. Each test failed on the reviewed code.

// provider is a siteverify endpoint: tokens good-* pass once; slow-*
// answer "not solved" after hold (or when the request ends); flaky-*
// fail with a 500 the first time, then pass once.
type provider struct {
	srv   *httptest.Server
	hold  atomic.Int64 // how long a slow- token is thought over (a time.Duration)
	mu    sync.Mutex
	seen  map[string]int
	calls atomic.Int32
}

func newProvider(t *testing.T) *provider {
	p := &provider{seen: map[string]int{}}
	p.hold.Store(int64(3 * time.Second))
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.calls.Add(1)
		_ = r.ParseForm()
		tok := r.PostForm.Get("response")
		p.mu.Lock()
		p.seen[tok]++
		n := p.seen[tok]
		p.mu.Unlock()
		ok := false
		switch {
		case strings.HasPrefix(tok, "slow-"):
			select {
			case <-time.After(time.Duration(p.hold.Load())):
			case <-r.Context().Done():
			}
		case strings.HasPrefix(tok, "flaky-") && n == 1:
			w.WriteHeader(http.StatusInternalServerError)
			return
		case strings.HasPrefix(tok, "flaky-") && n == 2, strings.HasPrefix(tok, "good-") && n == 1:
			ok = true
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"success": ok, "hostname": "app.example.com"})
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// failOnce makes the store's spend-once call fail (a Redis that times out
// on it) while set.
type failOnce struct{ on atomic.Bool }

func (f *failOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.on.Load() && strings.Contains(fmt.Sprint(cmd.Args()...), "blob_once") {
			return errors.New("i/o timeout (injected)")
		}
		return next(ctx, cmd)
	}
}
func (f *failOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type captchaHarness struct {
	*harness
	p    *provider
	fail *failOnce
}

// newCaptchaHarness: every signup and send after the first of the hour is
// challenged; signup's challenge allows on store errors (its default),
// the send's denies.
func newCaptchaHarness(t *testing.T) *captchaHarness {
	t.Helper()
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	h := &captchaHarness{harness: &harness{a: &auth{login: func(context.Context) error { return nil }}, s: &sender{}}, p: newProvider(t), fail: &failOnce{}}
	rdb.AddHook(h.fail)
	_, key, _ := ed25519.GenerateKey(nil)
	cfg, err := config.Parse(fmt.Appendf(nil, `network: {trustedProxies: [192.0.2.0/24]}
store: {timeout: 2s}
challenge: {captcha: {provider: turnstile, verifyUrl: %q, siteKey: site-key, timeout: 5s}}
rules:
  - {name: signup-challenge, action: signup, key: [global], limit: 1, window: 1h, mode: challenge}
  - {name: send-challenge, action: otp.send, key: [global], limit: 1, window: 1h, mode: challenge}
`, h.p.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	h.app, err = app.New(context.Background(), app.Settings{Redis: rdb, Secret: []byte("0123456789abcdef0123"), Auth: h.a,
		Senders: func(queue.Host) (message.Sender, error) { return h.s, nil }, CaptchaSecret: "captcha-secret"}, cfg, app.Keys{Signing: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.app.Close)
	return h
}

func (h *captchaHarness) signup(ctx context.Context, email, token string) *httptest.ResponseRecorder {
	return h.post(ctx, "/v1/signup", fmt.Sprintf(`{"email":%q,"password":"correct horse battery staple","captchaToken":%q}`, email, token), "198.51.100.1")
}

func (h *captchaHarness) send(email, token string) *httptest.ResponseRecorder {
	return h.post(context.Background(), "/v1/otp/send", fmt.Sprintf(`{"channel":"email","to":%q,"purpose":"login","captchaToken":%q}`, email, token), "198.51.100.1")
}

func (h *captchaHarness) signups() int {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	return h.a.signups
}

// TestAHangUpIsNoProviderFailure: a client sends a challenged signup with
// a token the provider will refuse, and hangs up while the provider
// thinks. The reviewed code took the cancelled call for a provider
// outage, allowed the signup (onStoreError allow) and created the
// account: 10 of 10.
func TestAHangUpIsNoProviderFailure(t *testing.T) {
	h := newCaptchaHarness(t)
	if w := h.signup(context.Background(), "first@example.com", ""); w.Code != 202 {
		t.Fatalf("the hour's first signup: %d %s", w.Code, w.Body)
	}
	before := h.signups()
	for i := range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- h.signup(ctx, fmt.Sprintf("hangup%d@example.com", i), fmt.Sprintf("slow-%d", i)) }()
		for h.p.calls.Load() < int32(i+1) {
			time.Sleep(time.Millisecond) // the provider has the token
		}
		cancel()
		if w := <-done; w.Code == 202 {
			t.Fatalf("signup %d, hung up on: 202 %s", i, w.Body)
		}
	}
	if n := h.signups() - before; n != 0 {
		t.Fatalf("%d accounts made by signups whose clients hung up, with tokens the provider refuses", n)
	}
	// the provider failing for real still follows onStoreError (allow)
	h.p.hold.Store(int64(6 * time.Second))
	if w := h.signup(context.Background(), "timeout@example.com", "slow-late"); w.Code != 202 {
		t.Fatalf("a provider that times out, onStoreError allow: %d %s", w.Code, w.Body)
	}
}

// TestAProviderFailureDoesNotSpendTheToken: the provider fails (a 500)
// on a valid token: the send is refused (onStoreError deny) and the user
// sends the same token again, which the provider then accepts. The
// reviewed code had marked the token spent before the provider answered:
// the retry was "already used".
func TestAProviderFailureDoesNotSpendTheToken(t *testing.T) {
	h := newCaptchaHarness(t)
	h.send("first@example.com", "")
	if w := h.send("a@example.com", "flaky-1"); w.Code != 503 || !strings.Contains(w.Body.String(), "captcha_unavailable") {
		t.Fatalf("the provider fails: %d %s", w.Code, w.Body)
	}
	if w := h.send("a@example.com", "flaky-1"); w.Code != 202 {
		t.Fatalf("the same token again, accepted by the provider: %d %s", w.Code, w.Body)
	}
	if w := h.send("b@example.com", "flaky-1"); w.Code != 403 || !strings.Contains(w.Body.String(), "already used") {
		t.Fatalf("the token, once accepted, again: %d %s", w.Code, w.Body)
	}
}

// TestATokenIsNotCheckedWithoutItsSpentMark: Redis fails on the mark that
// spends a token: the request is not let through on the provider's word
// alone (the reviewed code ignored the error, and a token could then be
// replayed as long as Redis failed).
func TestATokenIsNotCheckedWithoutItsSpentMark(t *testing.T) {
	h := newCaptchaHarness(t)
	h.send("first@example.com", "")
	h.fail.on.Store(true)
	for i := range 3 {
		w := h.send("a@example.com", "good-replayed")
		if w.Code != 503 || !strings.Contains(w.Body.String(), "store_unavailable") {
			t.Fatalf("try %d while the spent mark fails: %d %s", i, w.Code, w.Body)
		}
	}
	if n := h.p.calls.Load(); n != 0 {
		t.Fatalf("the provider was asked %d times without the mark", n)
	}
	h.fail.on.Store(false)
	if w := h.send("a@example.com", "good-replayed"); w.Code != 202 {
		t.Fatalf("the token once Redis answers: %d %s", w.Code, w.Body)
	}
}

// TestAStepUpOutlivesAHangUp: the client hangs up once its right
// password was checked, on a login a step-up rule challenges: the
// attempt is held and the owner gets the code all the same (the reviewed
// code stopped on the cancelled context, gave the attempt back and
// answered 503: a free probe that told the password was right, and the
// owner never heard of it).
func TestAStepUpOutlivesAHangUp(t *testing.T) {
	h := newHarness(t)
	h.a.mu.Lock()
	h.a.verified = "owner@example.com"
	h.a.mu.Unlock()
	login := func(ctx context.Context, ip string) *httptest.ResponseRecorder {
		return h.post(ctx, "/v1/login", `{"username":"owner@example.com","password":"correct horse battery staple"}`, ip)
	}
	if w := login(context.Background(), "198.51.100.7"); w.Code != 200 || strings.Contains(w.Body.String(), "challenge") {
		t.Fatalf("the owner at home: %d %s", w.Code, w.Body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.a.mu.Lock()
	h.a.login = func(context.Context) error { cancel(); return nil } // the client hangs up while the password is checked
	h.a.mu.Unlock()
	sent := h.s.sent
	if w := login(ctx, "203.0.113.7"); strings.Contains(w.Body.String(), "authenticated") {
		t.Fatalf("a hung-up login from a new network: %d %s", w.Code, w.Body)
	}
	h.a.mu.Lock()
	h.a.login = func(context.Context) error { return nil }
	h.a.mu.Unlock()
	h.s.mu.Lock()
	codes := h.s.sent - sent
	h.s.mu.Unlock()
	if codes != 1 {
		t.Fatalf("%d step-up codes sent to the owner for the hung-up login, want 1", codes)
	}
	if w := login(context.Background(), "198.51.100.8"); !strings.Contains(w.Body.String(), `"challenge"`) {
		t.Fatalf("the owner at home after the held login: %d %s", w.Code, w.Body)
	}
}
