package captcha_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/captcha"
	"github.com/otpguard/otpguard/guard/proof"
)

// provider is a siteverify endpoint that answers what the test sets, and
// records the form it was sent.
type provider struct {
	mu     sync.Mutex
	status int
	body   string
	form   url.Values
	calls  int
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	b, _ := io.ReadAll(r.Body)
	p.form, _ = url.ParseQuery(string(b))
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(p.status)
	_, _ = io.WriteString(w, p.body)
}

func setup(t *testing.T, hostnames ...string) (*captcha.Verifier, *provider) {
	t.Helper()
	p := &provider{status: http.StatusOK, body: `{"success":true,"hostname":"app.example.com"}`}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	v, err := captcha.New(config.CaptchaConfig{Provider: "turnstile", VerifyURL: srv.URL, SiteKey: "site-key",
		Hostnames: hostnames, Timeout: 30 * time.Second}, "the-secret", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return v, p
}

var ip = netip.MustParseAddr("198.51.100.7")

// TestATokenSolvedOnAnotherSiteIsRejected: a token the provider accepts
// but that was solved on another hostname (a site the attacker runs with
// the same widget, or a CAPTCHA farm's) is refused as a wrong answer.
// (Without the hostname check, a mutant an outside review injected, every
// earlier test passed.)
func TestATokenSolvedOnAnotherSiteIsRejected(t *testing.T) {
	v, p := setup(t, "app.example.com", "www.example.com")
	ctx := context.Background()
	if err := v.Verify(ctx, "tok", ip); err != nil {
		t.Fatalf("solved on app.example.com: %v", err)
	}
	p.body = `{"success":true,"hostname":"www.example.com"}`
	if err := v.Verify(ctx, "tok", ip); err != nil {
		t.Fatalf("solved on www.example.com: %v", err)
	}
	for _, body := range []string{`{"success":true,"hostname":"evil.example"}`, `{"success":true}`, `{"success":true,"hostname":"APP.example.com.evil.example"}`} {
		p.body = body
		if err := v.Verify(ctx, "tok", ip); !errors.Is(err, proof.ErrCaptchaRejected) {
			t.Errorf("siteverify answered %s: got %v, want a rejection", body, err)
		}
	}
	// no hostnames configured: any hostname the provider vouches for
	v, p = setup(t)
	p.body = `{"success":true,"hostname":"anywhere.example"}`
	if err := v.Verify(ctx, "tok", ip); err != nil {
		t.Fatalf("without hostnames: %v", err)
	}
}

// TestSiteverify: what is sent (the secret, the token, the client's
// address), and how each answer is read: a refusal is the client's wrong
// answer (ErrCaptchaRejected), a provider that fails is an error of its
// own (handled as the rule's onStoreError), never a pass.
func TestSiteverify(t *testing.T) {
	ctx := context.Background()
	v, p := setup(t)
	if v.SiteKey() != "site-key" || v.Provider() != "turnstile" {
		t.Fatalf("site key %q, provider %q", v.SiteKey(), v.Provider())
	}
	if err := v.Verify(ctx, "the-token", ip); err != nil {
		t.Fatal(err)
	}
	if p.form.Get("secret") != "the-secret" || p.form.Get("response") != "the-token" || p.form.Get("remoteip") != "198.51.100.7" {
		t.Fatalf("sent %v", p.form)
	}
	if err := v.Verify(ctx, "the-token", netip.Addr{}); err != nil || p.form.Has("remoteip") {
		t.Fatalf("without an address: %v, sent %v", err, p.form)
	}

	calls := p.calls
	for _, tok := range []string{"", strings.Repeat("x", 4097)} {
		if err := v.Verify(ctx, tok, ip); !errors.Is(err, proof.ErrCaptchaRejected) {
			t.Errorf("a token of %d bytes: %v, want a rejection", len(tok), err)
		}
	}
	if p.calls != calls {
		t.Error("an empty or oversized token reached the provider")
	}
	if err := v.Verify(ctx, strings.Repeat("x", 4096), ip); err != nil {
		t.Errorf("a token of 4096 bytes: %v", err)
	}

	p.body = `{"success":false,"error-codes":["invalid-input-response","timeout-or-duplicate"]}`
	if err := v.Verify(ctx, "tok", ip); !errors.Is(err, proof.ErrCaptchaRejected) || !strings.Contains(err.Error(), "timeout-or-duplicate") {
		t.Errorf("a refusal: %v", err)
	}
	for _, c := range []struct {
		status int
		body   string
	}{
		{http.StatusInternalServerError, `{"success":true}`},
		{http.StatusOK, `not json`},
		{http.StatusOK, `{"success":true,"pad":"` + strings.Repeat("x", 64<<10) + `"}`},
	} {
		p.status, p.body = c.status, c.body
		err := v.Verify(ctx, "tok", ip)
		if err == nil || errors.Is(err, proof.ErrCaptchaRejected) {
			t.Errorf("status %d, %d bytes: %v, want a provider failure", c.status, len(c.body), err)
		}
	}
	p.status, p.body = http.StatusOK, `{"success":true,"pad":"`+strings.Repeat("x", 60<<10)+`"}`
	if err := v.Verify(ctx, "tok", ip); err != nil {
		t.Errorf("an answer of 60 KiB: %v", err)
	}
	// an answer past 64 KiB is refused even when what comes first would
	// read as a success
	p.body = `{"success":true}` + strings.Repeat(" ", 64<<10)
	if err := v.Verify(ctx, "tok", ip); err == nil || errors.Is(err, proof.ErrCaptchaRejected) {
		t.Errorf("an answer of 64 KiB and more: %v, want a provider failure", err)
	}
	p.body = `{"success":true}` + strings.Repeat(" ", 64<<10-len(`{"success":true}`))
	if err := v.Verify(ctx, "tok", ip); err != nil {
		t.Errorf("an answer of 64 KiB exactly: %v", err)
	}
}

// TestAProviderThatHangsIsBounded: a siteverify call ends at the
// configured timeout.
func TestAProviderThatHangsIsBounded(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	v, err := captcha.New(config.CaptchaConfig{Provider: "hcaptcha", VerifyURL: srv.URL, Timeout: 200 * time.Millisecond}, "s", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	err = v.Verify(context.Background(), "tok", ip)
	if err == nil || errors.Is(err, proof.ErrCaptchaRejected) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a provider that hangs: %v", err)
	}
}

func TestNewNeedsTheSecret(t *testing.T) {
	for _, s := range []string{"", "  "} {
		if _, err := captcha.New(config.CaptchaConfig{Provider: "turnstile"}, s, nil); err == nil {
			t.Errorf("secret %q accepted", s)
		}
	}
	// without a client, http.DefaultClient
	srv := httptest.NewServer(&provider{status: http.StatusOK, body: `{"success":true}`})
	defer srv.Close()
	v, err := captcha.New(config.CaptchaConfig{Provider: "turnstile", VerifyURL: srv.URL, Timeout: 30 * time.Second}, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(context.Background(), "tok", ip); err != nil {
		t.Fatal(err)
	}
}
