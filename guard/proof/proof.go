// Package proof is the contract of what proves a challenged client is a
// person: a CAPTCHA verifier. guard/api asks for one (api.Captcha is
// this Captcha); guard/captcha implements it for reCAPTCHA, hCaptcha and
// Turnstile. An adapter imports this, not the HTTP API.
package proof

import (
	"context"
	"errors"
	"net/netip"
)

// Captcha verifies a solved CAPTCHA's token with its provider.
type Captcha interface {
	// Verify returns nil for a token the provider accepts,
	// ErrCaptchaRejected for one it refuses (unsolved, expired, used, for
	// another site), or another error when the provider cannot say.
	Verify(ctx context.Context, token string, remoteIP netip.Addr) error
	// SiteKey and Provider are what the client's widget needs.
	SiteKey() string
	Provider() string
}

// ErrCaptchaRejected: the provider refused the token.
var ErrCaptchaRejected = errors.New("the CAPTCHA was not solved")
