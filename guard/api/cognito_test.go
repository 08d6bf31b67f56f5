package api_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/delivery/queue"
)

// The Cognito triggers' entry points (internal/triggers decodes the
// events and calls these), on the whole app over an embedded Redis.

func cognitoServer(t *testing.T, rules string) (*api.Server, *app.App, *outbox) {
	t.Helper()
	h, out := serve(t, "rules:\n"+rules, nil)
	a := h.(*app.App)
	return a.Server(), a, out
}

func denied(t *testing.T, err error) *api.Denied {
	t.Helper()
	var d *api.Denied
	if !errors.As(err, &d) {
		t.Fatalf("want a *api.Denied, got %v", err)
	}
	return d
}

var ip = netip.MustParseAddr("203.0.113.9")

// TestCognitoSendAppliesTheSendRules: a custom sender's message counts on
// the otp.send rules under its source's purpose; a denial is a Denied that
// says when to retry in words and sends nothing; the takeover notice is
// never limited; an invitation's user name is escaped in its HTML.
func TestCognitoSendAppliesTheSendRules(t *testing.T) {
	s, _, out := cognitoServer(t, "  - {name: per-dest, action: otp.send, key: [destination], limit: 1, window: 1h}\n")
	ctx := context.Background()
	msg := api.CognitoMessage{TriggerSubject: api.TriggerSubject{Account: "ann", IP: ip}, Source: "SignUp", Channel: message.Email, To: "ann@example.com", Code: "123456"}
	if err := s.CognitoSend(ctx, msg); err != nil {
		t.Fatal(err)
	}
	m := out.last(t)
	if m.To != "ann@example.com" || m.Code != "123456" || m.Purpose != "signup" || !strings.Contains(m.Text, "123456") ||
		m.Slot != "cognito\x00ann@example.com\x00SignUp" || m.Receipt == "" {
		t.Fatalf("the message: %+v", m)
	}
	d := denied(t, s.CognitoSend(ctx, msg))
	if d.Rule != "per-dest" || d.Message != "Too many attempts. Try again in an hour." {
		t.Errorf("the second: %+v", d)
	}
	if n := len(out.msgs); n != 1 {
		t.Errorf("%d messages sent, want 1", n)
	}
	// another purpose of the same address counts on the same rule
	msg.Source = "ForgotPassword"
	denied(t, s.CognitoSend(ctx, msg))

	if err := s.CognitoSend(ctx, api.CognitoMessage{Source: "Nonsense", Channel: message.Email, To: "ann@example.com"}); err == nil || errors.As(err, new(*api.Denied)) {
		t.Errorf("an unknown source is an error, not a denial: %v", err)
	}
	d = denied(t, s.CognitoSend(ctx, api.CognitoMessage{Source: "SignUp", Channel: message.SMS, To: "12", Code: "123456"}))
	if d.Message != "This destination cannot receive messages." || !strings.HasPrefix(d.Rule, "destination: ") {
		t.Errorf("a destination that cannot receive: %+v", d)
	}
	for range 3 {
		if err := s.CognitoSend(ctx, api.CognitoMessage{Source: "AccountTakeOverNotification", Channel: message.Email, To: "ann@example.com"}); err != nil {
			t.Fatalf("the takeover notice: %v", err)
		}
	}
	if m := out.last(t); m.Purpose != "" || m.Slot != "" || m.Receipt != "" || m.Subject != "A sign-in to your account" {
		t.Errorf("the takeover notice: %+v", m)
	}
	if err := s.CognitoSend(ctx, api.CognitoMessage{Source: "AdminCreateUser", Channel: message.Email, To: "bob@example.com", Code: "Temp&1", Username: "<b>bob</b>"}); err != nil {
		t.Fatal(err)
	}
	if m := out.last(t); m.Text != "Your username is <b>bob</b> and your temporary password is Temp&1" ||
		m.HTML != "<p>Your username is &lt;b&gt;bob&lt;/b&gt; and your temporary password is Temp&amp;1</p>" || m.Purpose != "signup" {
		t.Errorf("the invitation: %+v", m)
	}
}

// TestADeniedTriggerSaysWhenInWords: the wait a denial names, by the
// denying rule's window.
func TestADeniedTriggerSaysWhenInWords(t *testing.T) {
	for _, c := range []struct{ window, want string }{
		{"30s", "in a minute"}, {"10m", "in 10 minutes"}, {"3h", "in 3 hours"}, {"72h", "later"},
	} {
		s, _, _ := cognitoServer(t, "  - {name: r, action: signup, key: [ip], limit: 1, window: "+c.window+"}\n")
		sub := api.TriggerSubject{Account: "ann", IP: ip}
		if err := s.CognitoSignUp(context.Background(), sub, "ann@example.com", ""); err != nil {
			t.Fatal(err)
		}
		d := denied(t, s.CognitoSignUp(context.Background(), sub, "bob@example.com", ""))
		if d.Message != "Too many attempts. Try again "+c.want+"." || d.Rule != "r" {
			t.Errorf("window %s: %+v", c.window, d)
		}
	}
}

// TestCognitoSignUpChecksTheDestination: a sign-up counts on the signup
// rules by its email (else phone) and account; an unusable one is a
// Denied naming the kind of destination.
func TestCognitoSignUpChecksTheDestination(t *testing.T) {
	s, a, _ := cognitoServer(t, "  - {name: per-dest, action: signup, key: [destination], limit: 1, window: 1h}\n  - {name: per-account, action: signup, key: [account], limit: 5, window: 1h}\n")
	ctx := context.Background()
	sub := api.TriggerSubject{Account: "ann"}
	if err := s.CognitoSignUp(ctx, sub, "", "+14155550100"); err != nil {
		t.Fatal(err)
	}
	if d := denied(t, s.CognitoSignUp(ctx, sub, "", "(415) 555-0100")); d.Rule != "per-dest" {
		t.Errorf("the same number again: %+v", d)
	}
	if err := s.CognitoSignUp(ctx, sub, "ann@example.com", "+14155550100"); err != nil {
		t.Errorf("the email counts, not the number: %v", err)
	}
	if d := denied(t, s.CognitoSignUp(ctx, sub, "not an address", "")); d.Message != "This email address cannot be used." {
		t.Errorf("a bad email: %+v", d)
	}
	if d := denied(t, s.CognitoSignUp(ctx, sub, "", "12")); d.Message != "This phone number cannot be used." {
		t.Errorf("a bad number: %+v", d)
	}
	st, err := a.Guard().Status(ctx, "account", guard.Subject{Account: "ann"})
	if err != nil || len(st) != 1 || st[0].Remaining != 3 {
		t.Errorf("the account counted the two sign-ups the rules admitted, not the refused ones: %+v %v", st, err)
	}
}

// TestCognitoConfirmedGivesTheCodesBack: the sign-up codes a custom sender
// delivered stay unverified until the confirmation, which settles every
// one of them (not only the last), once; a reset's confirmation settles
// the reset codes only.
func TestCognitoConfirmedGivesTheCodesBack(t *testing.T) {
	s, _, _ := cognitoServer(t, "  - {name: unverified, action: otp.send, key: [destination], count: failures, limit: 2, window: 24h}\n")
	ctx := context.Background()
	send := func(source string) error {
		return s.CognitoSend(ctx, api.CognitoMessage{Source: source, Channel: message.Email, To: "ann@example.com", Code: "123456"})
	}
	for range 2 {
		if err := send("SignUp"); err != nil {
			t.Fatal(err)
		}
	}
	denied(t, send("ResendCode"))
	if err := s.CognitoConfirmed(ctx, true, "ann@example.com", ""); err != nil {
		t.Fatal(err)
	}
	denied(t, send("ResendCode")) // a reset's confirmation settles no sign-up code
	if err := s.CognitoConfirmed(ctx, false, "Ann@Example.com", ""); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := send("ResendCode"); err != nil {
			t.Fatalf("after the confirmation, send %d: %v", i+1, err)
		}
	}
	denied(t, send("ResendCode"))
	if err := s.CognitoConfirmed(ctx, false, "", "+14155550100"); err != nil {
		t.Errorf("a confirmation with nothing kept: %v", err)
	}
}

// TestCognitoPreAuthenticationCountsUntilProven: each sign-in counts as a
// failure until its receipt is settled by PostAuthentication; past the
// limit the account is locked for the rule's lockout.
func TestCognitoPreAuthenticationCountsUntilProven(t *testing.T) {
	s, a, _ := cognitoServer(t, "  - {name: locks, action: login, key: [account], count: failures, limit: 2, window: 1h, lockout: {initial: 10m, factor: 2, max: 1h}}\n")
	ctx := context.Background()
	sub := api.TriggerSubject{Account: "ann", IP: ip}
	r1, err := s.CognitoPreAuthentication(ctx, sub)
	if err != nil || r1 == "" {
		t.Fatalf("first: %q %v", r1, err)
	}
	if err := s.CognitoPostAuthentication(ctx, r1); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if r, err := s.CognitoPreAuthentication(ctx, sub); err != nil || r == "" {
			t.Fatalf("attempt %d: %q %v", i+2, r, err)
		}
	}
	r, err := s.CognitoPreAuthentication(ctx, sub)
	d := denied(t, err)
	if r != "" || d.Rule != "locks" || d.Message != "Too many attempts. Try again in 10 minutes." {
		t.Errorf("past the limit: %q %+v", r, d)
	}
	st, err := a.Guard().Status(ctx, "account", guard.Subject{Account: "ann"})
	if err != nil || len(st) != 1 || !st[0].Locked {
		t.Errorf("the account is locked: %+v %v", st, err)
	}
}

// TestACognitoTriggerLetsTheFallbackAnswerAChallenge: a trigger cannot
// ask for a step-up inside Cognito's flow, so past a challenge rule's
// limit its fallback decides: deny refuses the sign-in, allow lets it
// through; under the limit nothing is challenged and both admit.
func TestACognitoTriggerLetsTheFallbackAnswerAChallenge(t *testing.T) {
	for _, fallback := range []string{"deny", "allow"} {
		t.Run(fallback, func(t *testing.T) {
			s, _, _ := cognitoServer(t, "  - {name: stepup, action: login, key: [global], limit: 1, window: 1h, mode: challenge, fallback: "+fallback+"}\n")
			ctx := context.Background()
			sub := api.TriggerSubject{Account: "ann", IP: ip}
			if _, err := s.CognitoPreAuthentication(ctx, sub); err != nil {
				t.Fatalf("under the limit: %v", err)
			}
			r, err := s.CognitoPreAuthentication(ctx, sub)
			switch fallback {
			case "deny":
				if d := denied(t, err); r != "" || d.Rule != "stepup" {
					t.Errorf("challenged, fallback deny: %q %+v", r, d)
				}
			case "allow":
				if err != nil {
					t.Errorf("challenged, fallback allow: %q %v", r, err)
				}
			}
		})
	}
}

// TestCognitoConfirmedSettlesTheNewestCodesItKept: an address's receipts
// are kept up to 64 a purpose: of 70 sign-up codes (under a limit of 70
// unanswered), the confirmation gives back the newest 64, and the 6
// oldest stay counted.
func TestCognitoConfirmedSettlesTheNewestCodesItKept(t *testing.T) {
	s, _, _ := cognitoServer(t, "  - {name: unverified, action: otp.send, key: [destination], count: failures, limit: 70, window: 24h}\n")
	ctx := context.Background()
	send := func() error {
		return s.CognitoSend(ctx, api.CognitoMessage{Source: "SignUp", Channel: message.Email, To: "ann@example.com", Code: "123456"})
	}
	for i := range 70 {
		if err := send(); err != nil {
			t.Fatalf("send %d: %v", i+1, err)
		}
	}
	denied(t, send())
	if err := s.CognitoConfirmed(ctx, false, "ann@example.com", ""); err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		if err := send(); err != nil {
			t.Fatalf("after the confirmation, send %d: %v", i+1, err)
		}
	}
	denied(t, send())
}

// failing is a sender that fails with err while it is set.
type failing struct{ err error }

func (f *failing) Send(context.Context, message.Message) error { return f.err }

// TestACognitoMessageThatFailsGivesItsSendBack: a message the provider
// could not take (an outage) gives its send back, so the user's retry is
// not refused for it; one the provider refuses as undeliverable keeps it
// (the address cannot receive: its sends count).
func TestACognitoMessageThatFailsGivesItsSendBack(t *testing.T) {
	for _, c := range []struct {
		err       error
		givenBack bool
	}{{errors.New("the provider is down"), true}, {message.ErrUndeliverable, false}} {
		sender := &failing{c.err}
		h, _ := serve(t, "rules:\n  - {name: per-dest, action: otp.send, key: [destination], limit: 1, window: 1h}\n",
			func(st *app.Settings) { st.Senders = func(queue.Host) (message.Sender, error) { return sender, nil } })
		s := h.(*app.App).Server()
		ctx := context.Background()
		msg := api.CognitoMessage{Source: "SignUp", Channel: message.Email, To: "ann@example.com", Code: "123456"}
		if err := s.CognitoSend(ctx, msg); err == nil || errors.As(err, new(*api.Denied)) {
			t.Fatalf("%v: the failed send answered %v", c.err, err)
		}
		sender.err = nil
		err := s.CognitoSend(ctx, msg)
		if c.givenBack && err != nil {
			t.Errorf("%v: the retry: %v, want it sent", c.err, err)
		}
		if !c.givenBack {
			denied(t, err)
		}
	}
}
