// Package captcha verifies solved CAPTCHAs with their provider's
// siteverify API: Cloudflare Turnstile, hCaptcha and reCAPTCHA share its
// form (POST secret, response, remoteip → JSON success, hostname,
// error-codes). The API spends each token once before asking the provider
// (the API's Blobs), so a replay never reaches it.
package captcha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/proof"
)

// Verifier is an proof.Captcha.
type Verifier struct {
	cfg    config.CaptchaConfig
	secret string
	client *http.Client
}

var _ proof.Captcha = (*Verifier)(nil)

// New returns the verifier of a validated challenge.captcha with its
// secret; client nil means http.DefaultClient (bounded by cfg.Timeout per
// call).
func New(cfg config.CaptchaConfig, secret string, client *http.Client) (*Verifier, error) {
	if strings.TrimSpace(secret) == "" {
		return nil, errors.New("captcha: challenge.captcha needs its secret (CAPTCHA_SECRET, or its Secrets Manager secret on AWS)")
	}
	if client == nil {
		client = http.DefaultClient
	}
	return &Verifier{cfg: cfg, secret: secret, client: client}, nil
}

// SiteKey implements proof.Captcha.
func (v *Verifier) SiteKey() string { return v.cfg.SiteKey }

// Provider implements proof.Captcha.
func (v *Verifier) Provider() string { return v.cfg.Provider }

// maxAnswer bounds a siteverify answer.
const maxAnswer = 64 << 10

// Verify implements proof.Captcha.
func (v *Verifier) Verify(ctx context.Context, token string, remoteIP netip.Addr) error {
	if token == "" || len(token) > 4096 {
		return proof.ErrCaptchaRejected
	}
	ctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
	defer cancel()
	form := url.Values{"secret": {v.secret}, "response": {token}}
	if remoteIP.IsValid() {
		form.Set("remoteip", remoteIP.String())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.cfg.VerifyURL, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	began := time.Now()
	resp, err := v.client.Do(req)
	if err != nil {
		return fmt.Errorf("captcha: siteverify after %s: %w", time.Since(began).Round(time.Millisecond), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil || len(body) > maxAnswer {
		return fmt.Errorf("captcha: siteverify answer unreadable")
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("captcha: siteverify answered %d", resp.StatusCode)
	}
	var out struct {
		Success  bool     `json:"success"`
		Hostname string   `json:"hostname"`
		Codes    []string `json:"error-codes"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return fmt.Errorf("captcha: siteverify answer is not JSON")
	}
	if !out.Success {
		return fmt.Errorf("%w (%s)", proof.ErrCaptchaRejected, strings.Join(out.Codes, ", "))
	}
	if len(v.cfg.Hostnames) > 0 && !slices.Contains(v.cfg.Hostnames, out.Hostname) {
		return fmt.Errorf("%w (solved on %q)", proof.ErrCaptchaRejected, out.Hostname)
	}
	return nil
}
