package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/app"
)

// phoneOnly is an authenticator whose account has a verified phone (and
// no verified email) and takes one password.
type phoneOnly struct{ phone string }

func (p phoneOnly) Login(_ context.Context, l authn.Login) (authn.LoginResult, error) {
	if l.Password != "correct horse battery staple" {
		return authn.LoginResult{}, authn.ErrInvalidCredentials
	}
	return authn.LoginResult{Token: true, VerifiedPhone: p.phone}, nil
}
func (phoneOnly) SignUp(context.Context, authn.SignUp) error { return nil }

// TestAStepUpCodeGoesToTheVerifiedPhone: an account with no verified
// email gets its step-up code by SMS at its verified phone, and the code
// opens the session; a phone that is not a number leaves no way to send,
// and the rule's fallback (deny) refuses.
func TestAStepUpCodeGoesToTheVerifiedPhone(t *testing.T) {
	const rules = "rules:\n  - {name: stepup, action: login, key: [global], limit: 1, window: 1h, mode: challenge, fallback: deny}\n"
	login := map[string]string{"username": "ann", "password": "correct horse battery staple"}
	h, out := serve(t, rules, func(s *app.Settings) { s.Auth = phoneOnly{"+1 415 555 0100"} })
	call(t, h, "POST", "/v1/login", login, false)
	w, m := call(t, h, "POST", "/v1/login", login, false)
	if w.Code != http.StatusOK || m["status"] != "challenge" || m["to"] != "+1********00" {
		t.Fatalf("challenged, with a verified phone: %d %v", w.Code, m)
	}
	msg := out.last(t)
	if msg.Channel != message.SMS || msg.To != "+14155550100" {
		t.Fatalf("the step-up code went to %s %q", msg.Channel, msg.To)
	}
	w, m = call(t, h, "POST", "/v1/login/challenge", map[string]string{"session": m["session"].(string), "code": msg.Code}, false)
	if w.Code != http.StatusOK || m["status"] != "authenticated" {
		t.Fatalf("the phone's code: %d %v", w.Code, m)
	}

	h, _ = serve(t, rules, func(s *app.Settings) { s.Auth = phoneOnly{"not a number"} })
	call(t, h, "POST", "/v1/login", login, false)
	w, m = call(t, h, "POST", "/v1/login", login, false)
	if w.Code != http.StatusTooManyRequests || m["rule"] != "stepup" {
		t.Fatalf("challenged, with no phone to send to: %d %v", w.Code, m)
	}
}
