package api

// Cognito's Lambda triggers (docs/contract.md §10): the same rules, store,
// senders, logs and metrics as the HTTP routes, for a user pool that apps
// call directly. internal/triggers decodes the events and decrypts the
// codes; these methods decide, send and count.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"net/netip"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/templates"
)

// Denied is a trigger's refusal: Cognito shows Message to the user (as
// UserLambdaValidationException), so it says when to retry and nothing
// of the account.
type Denied struct {
	Message string
	// Rule is the rule that denied, for the log (never shown).
	Rule string
}

func (d *Denied) Error() string { return d.Message }

// deniedFor is the refusal of decision d (or of the store failing).
func deniedFor(d guard.Decision, p *Problem) *Denied {
	if p != nil && p.Code == "store_unavailable" {
		return &Denied{Message: "The service is busy. Try again in a minute.", Rule: "store_unavailable"}
	}
	retry := d.RetryAfter
	if p != nil && p.RetryAfter > 0 {
		retry = time.Duration(p.RetryAfter) * time.Second
	}
	rule := d.DeniedBy
	if rule == "" {
		rule = d.ChallengedBy // a challenge its fallback refused
	}
	return &Denied{Message: "Too many attempts. Try again " + inWords(retry) + ".", Rule: rule}
}

// inWords is a wait in words a person reads: "in 3 minutes".
func inWords(d time.Duration) string {
	switch {
	case d <= time.Minute:
		return "in a minute"
	case d < time.Hour:
		return fmt.Sprintf("in %d minutes", int((d+time.Minute-1)/time.Minute))
	case d <= time.Hour:
		return "in an hour"
	case d < 48*time.Hour:
		return fmt.Sprintf("in %d hours", int((d+time.Hour-1)/time.Hour))
	}
	return "later"
}

// TriggerSubject is what a trigger knows of who is asking.
type TriggerSubject struct {
	// Account is the event's userName.
	Account string
	// IP is the client address a trusted backend passed in the event's
	// clientMetadata or validationData (otpguard:ip); invalid when none:
	// the rules keyed on ip and its networks are then skipped.
	IP netip.Addr
}

// CognitoMessage is a message a custom sender trigger asks to deliver.
type CognitoMessage struct {
	TriggerSubject
	// Source is the trigger source after the sender's name: SignUp,
	// ResendCode, ForgotPassword, Authentication, UpdateUserAttribute,
	// VerifyUserAttribute, AdminCreateUser, AccountTakeOverNotification.
	Source  string
	Channel message.Channel
	// To is the userAttributes' email or phone_number.
	To string
	// Code is the decrypted code (AdminCreateUser: the temporary
	// password, unescaped).
	Code string
	// Username is shown in the invitation (AdminCreateUser) only.
	Username string
	Locale   string
}

// cognitoPurposes maps a sender trigger's source to the purpose its
// message counts under; "" passes it through, unlimited.
var cognitoPurposes = map[string]string{
	"SignUp": "signup", "ResendCode": "signup", "AdminCreateUser": "signup",
	"ForgotPassword": "reset", "Authentication": "login",
	"UpdateUserAttribute": "verify", "VerifyUserAttribute": "verify",
	"AccountTakeOverNotification": "",
}

// CognitoPurpose is the purpose a custom sender's trigger source counts
// under, "" for AccountTakeOverNotification (never limited), and whether
// the source is one Cognito sends.
func CognitoPurpose(source string) (string, bool) {
	p, ok := cognitoPurposes[source]
	return p, ok
}

// maxKeptEntries bounds the receipt entries kept per address and purpose:
// the daily send limits keep real users far below it.
const maxKeptEntries = 64

// keepReceipt adds a message's receipt to those kept under key, so that
// the confirmation settles every message sent for it (a sign-up's code
// and each resend), not only the last. Receipts are lists of entries, so
// two joined with a space are one receipt naming both. Two sends for one
// address at the same instant may keep only one of the two (the other
// stays unverified, the safe side).
func (s *Server) keepReceipt(ctx context.Context, key, receipt string) error {
	kept, _, err := s.Blobs.Get(ctx, key)
	if err != nil {
		return err
	}
	entries := append(strings.Fields(string(kept)), strings.Fields(receipt)...)
	if len(entries) > maxKeptEntries {
		entries = entries[len(entries)-maxKeptEntries:]
	}
	return s.Blobs.Put(ctx, key, []byte(strings.Join(entries, " ")), 24*time.Hour)
}

// triggerAdmits reports whether a trigger lets decision d through: a
// challenged request cannot be answered inside Cognito's flow, so the
// challenging rule's fallback decides.
func (s *Server) triggerAdmits(d guard.Decision) bool {
	return d.Allowed && (!d.Challenged || d.Fallback == "allow")
}

// receiptKey is the Redis key of the receipts of the messages of purpose
// sent to dest through a custom sender (a keyed hash of both).
func (s *Server) receiptKey(dest guard.Destination, purpose string) string {
	m := hmac.New(sha256.New, s.Guard.Derive("cognito receipts"))
	m.Write([]byte(purpose + "\x00" + dest.Key))
	return "og:{" + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16]) + "}:cr"
}

// cognitoMessage renders a trigger's message: the code's template, or
// for an invitation (AdminCreateUser) the user name and temporary
// password, or the account-takeover notification.
func (s *Server) cognitoMessage(dest guard.Destination, purpose string, m CognitoMessage) (message.Message, error) {
	switch m.Source {
	case "AdminCreateUser":
		text := fmt.Sprintf("Your username is %s and your temporary password is %s", m.Username, m.Code)
		return message.Message{
			Channel: dest.Channel, To: dest.Address, Purpose: purpose, Locale: templates.Default, Code: m.Code,
			Subject: "Your temporary password", Text: text,
			HTML: "<p>" + html.EscapeString(text) + "</p>",
		}, nil
	case "AccountTakeOverNotification":
		text := "We noticed a risky sign-in to your account. If it was not you, change your password."
		return message.Message{
			Channel: dest.Channel, To: dest.Address, Locale: templates.Default,
			Subject: "A sign-in to your account", Text: text, HTML: "<p>" + text + "</p>",
		}, nil
	}
	return s.message(dest, purpose, m.Locale, m.Code)
}

// CognitoSignUp applies the signup rules (PreSignUp): keyed on the
// destination the user signs up with (email, else phone_number) and the
// account. A denial is *Denied.
func (s *Server) CognitoSignUp(ctx context.Context, sub TriggerSubject, email, phone string) error {
	rec := newRecord("signup")
	defer s.logDecision(ctx, rec)
	ch, to := message.Email, email
	if email == "" {
		ch, to = message.SMS, phone
	}
	req := guard.Request{Action: "signup", Attributes: map[string]string{"channel": string(ch)}, Partial: true}
	if to != "" {
		dest, err := identity.ParseDestination(ch, to, s.policy)
		if err != nil {
			rec.outcome = "invalid_request"
			return &Denied{Message: "This " + map[message.Channel]string{message.Email: "email address", message.SMS: "phone number"}[ch] + " cannot be used.", Rule: "destination: " + reason(err)}
		}
		req.Subject.Destination = dest
		rec.subject = s.Guard.Fingerprint("destination", dest.Key)
	}
	return s.triggerDecide(ctx, rec, req, sub)
}

// triggerDecide completes req with sub, decides, and records the outcome.
func (s *Server) triggerDecide(ctx context.Context, rec *record, req guard.Request, sub TriggerSubject) error {
	if a, err := identity.ParseAccount(sub.Account); err == nil {
		req.Subject.Account, rec.account = a, a
		if rec.subject == "" {
			rec.subject = s.Guard.Fingerprint("account", a)
		}
	}
	if sub.IP.IsValid() {
		req.Subject.IP = sub.IP
		rec.ip = s.Guard.Fingerprint("ip", sub.IP.String())
	}
	req.Partial = true
	d, p := s.decide(ctx, req)
	rec.decision = d
	if p != nil || !s.triggerAdmits(d) {
		rec.outcome = "rate_limited"
		if p != nil {
			rec.outcome = p.Code
		}
		if d.Allowed {
			// a challenge nobody can answer here: the attempt is not made
			s.settle(ctx, req, d, guard.Void)
		}
		return deniedFor(d, p)
	}
	rec.outcome = "allowed"
	return nil
}

// CognitoPreAuthentication admits a sign-in attempt on the login rules
// and counts it as a failure until CognitoPostAuthentication gives it
// back (a wrong password never reaches that trigger, so it stays a
// failure, lockouts included). receipt is what giving it back takes
// (guard.Receipt: every rule the attempt counted on, those keyed on
// the client address and its networks included; "" when it took nothing
// to give back): Cognito passes PostAuthentication no client metadata,
// so the caller keeps it until then. A denial is *Denied.
func (s *Server) CognitoPreAuthentication(ctx context.Context, sub TriggerSubject) (receipt string, err error) {
	rec := newRecord("login")
	defer s.logDecision(ctx, rec)
	err = s.triggerDecide(ctx, rec, guard.Request{Action: "login"}, sub)
	var denied *Denied
	if err == nil {
		return s.Guard.Receipt(rec.decision), nil
	}
	if !errors.As(err, &denied) {
		return "", err
	}
	// The failures reached a limit. /v1/login learns of each failure
	// (its Settle starts a rule's lockout); a trigger never does, since a
	// wrong password never reaches PostAuthentication: the lockout starts
	// here, at the first attempt past the limit, for the rule's duration.
	d := rec.decision
	for _, res := range d.Rules {
		r := s.ruleSpec(res.Rule)
		if res.Allowed || res.Locked || res.Skipped || r == nil || r.Lockout == nil {
			continue
		}
		req := guard.Request{Action: "login", Subject: guard.Subject{Account: rec.account, IP: sub.IP}, Partial: true}
		for _, l := range s.settle(ctx, req, guard.Decision{}, guard.Failure) {
			if l.Locked && l.RetryAfter > d.RetryAfter {
				d.RetryAfter = l.RetryAfter
			}
		}
		return "", deniedFor(d, nil)
	}
	return "", err
}

// CognitoPostAuthentication settles, as successes, the attempts whose
// receipts CognitoPreAuthentication gave (the caller found which; see
// internal/triggers): each rule gets back exactly what the attempt took.
func (s *Server) CognitoPostAuthentication(ctx context.Context, receipts ...string) error {
	var errs []error
	for _, r := range receipts {
		errs = append(errs, s.Guard.SettleReceipt(context.WithoutCancel(ctx), r, guard.Success))
	}
	return errors.Join(errs...)
}

// CognitoConfirmed settles, as verified, the receipts of the sign-up (or,
// for a confirmed password reset, reset) messages a custom sender
// delivered to the address (PostConfirmation): the first code and every
// resend. Without one (the pool sends its own messages) there is nothing
// to settle.
func (s *Server) CognitoConfirmed(ctx context.Context, reset bool, email, phone string) error {
	if s.Blobs == nil {
		return nil
	}
	purpose := "signup"
	if reset {
		purpose = "reset"
	}
	var errs []error
	for ch, to := range map[message.Channel]string{message.Email: email, message.SMS: phone} {
		if to == "" {
			continue
		}
		dest, err := identity.ParseDestination(ch, to, s.policy)
		if err != nil {
			continue
		}
		key := s.receiptKey(dest, purpose)
		receipt, ok, err := s.Blobs.Get(ctx, key)
		if err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		if deleted, err := s.Blobs.Delete(ctx, key); err != nil || !deleted {
			errs = append(errs, err) // !deleted: another confirmation settled it
			continue
		}
		errs = append(errs, s.Guard.SettleReceipt(context.WithoutCancel(ctx), strings.TrimSpace(string(receipt)), guard.Success))
	}
	return errors.Join(errs...)
}
