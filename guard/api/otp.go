package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/token"
	"github.com/otpguard/otpguard/templates"
)

// sendResponse is the 202 of POST /v1/otp/send.
type sendResponse struct {
	Status  string `json:"status"`
	Channel string `json:"channel"`
	To      string `json:"to"`
	// ExpiresIn is the code's lifetime in seconds.
	ExpiresIn int `json:"expiresIn"`
	// ResendIn is the pace the configuration allows sends to one
	// destination at (see resendPace): the same for every send, so it
	// tells nobody whether someone else sent to this address.
	ResendIn int `json:"resendIn"`
	// Queued: the message waits its turn in the delivery queue
	// (DeliveryMode queue); DeliveryEta estimates the wait in seconds
	// when others are ahead of it.
	Queued      bool `json:"queued,omitempty"`
	DeliveryEta int  `json:"deliveryEta,omitempty"`
}

// verifyResponse is the 200 of POST /v1/otp/verify.
type verifyResponse struct {
	Status string `json:"status"`
	Token  string `json:"token"`
	// DeviceToken is, for the login and reset purposes, the trusted
	// device token of the address's account (also the og_device cookie).
	DeviceToken string `json:"deviceToken,omitempty"`
}

func (s *Server) handleSend(w http.ResponseWriter, r *http.Request) {
	rec := newRecord("otp.send")
	defer s.logDecision(r.Context(), rec)
	var in struct{ Channel, To, Purpose, Locale, CaptchaToken string }
	if p := decode(w, r, fields{"channel": &in.Channel, "to": &in.To, "purpose": &in.Purpose, "locale": &in.Locale, "captchaToken": &in.CaptchaToken}); p != nil {
		s.fail(w, rec, p)
		return
	}
	errs := map[string]string{}
	s.checkPurpose(in.Purpose, errs)
	dest := s.sendDestination(in.Channel, in.To, errs)
	if !templates.ValidLocale(in.Locale) {
		errs["locale"] = "must be a BCP 47 language tag such as en or fr-CA"
	}
	if s.Sender == nil {
		s.fail(w, rec, problem("delivery_unavailable", "this deployment sends no messages"))
		return
	}
	req, p := s.admit(r, rec, otpRequest("otp.send", dest, in.Purpose), "destination", dest.Key, errs)
	if p != nil {
		s.fail(w, rec, p)
		return
	}
	ctx := r.Context()
	if rec.decision.Challenged {
		if answer := s.challengeCaptcha(ctx, rec, req, in.CaptchaToken); answer != nil {
			answer(w) // the send stays counted: unproven, it is a failure
			return
		}
	}
	issued, release, ok := s.issue(ctx, w, rec, req, dest, in.Purpose)
	if !ok {
		return
	}
	defer release() // the queue's place, when nothing was queued
	msg, err := s.message(dest, in.Purpose, in.Locale, issued.Code)
	if err != nil {
		s.Log.ErrorContext(ctx, "render message", "err", err)
		s.settle(ctx, req, rec.decision, guard.Void)
		s.fail(w, rec, problem("internal_error", "the message could not be rendered"))
		return
	}
	numbered(&msg, dest, in.Purpose, issued)
	msg.Receipt = s.Guard.VoidReceipt(rec.decision) // a queued message given up on gives the send back
	// issue asked for room: Send does not ask again
	if err := s.Sender.Send(WithRoomChecked(ctx, release), msg); err != nil {
		s.sendFailed(ctx, w, rec, req, dest, err)
		return
	}
	rec.outcome = "sent"
	s.delivered(ctx, dest)
	s.sendAnswer(ctx, w, dest)
}

// issue stores a new code for a send the rules allowed and returns it,
// with the release of the sender's place for its message (see Roomer);
// false: the send was answered. A sender without room refuses it before
// the code is replaced, so the owner's code stays.
func (s *Server) issue(ctx context.Context, w http.ResponseWriter, rec *record, req guard.Request, dest guard.Destination, purpose string) (otp.Issued, func(), bool) {
	release, err := s.room(ctx, dest.Channel)
	if err != nil {
		s.sendFailed(ctx, w, rec, req, dest, err) // its units go back
		return otp.Issued{}, nil, false
	}
	// the send counts on the failure-counting send rules until the verify
	// that approves this code settles its receipt
	issued, err := s.Codes.Issue(ctx, dest, purpose, s.Guard.Receipt(rec.decision))
	if err != nil {
		release()
		// Nothing was sent: the send's units go back to every rule.
		s.Log.ErrorContext(ctx, "issue code", "err", err)
		s.settle(ctx, req, rec.decision, guard.Void)
		s.fail(w, rec, storeUnavailable())
		return otp.Issued{}, nil, false
	}
	return issued, release, true
}

// room is the Sender's refusal of a message of ch for want of room, or
// the release of the place it gives the message (see Roomer; a sender
// that is never full: a release that does nothing).
func (s *Server) room(ctx context.Context, ch message.Channel) (func(), error) {
	if q, ok := s.Sender.(Roomer); ok {
		return q.Room(ctx, ch)
	}
	return func() {}, nil
}

// sendDestination is where a send goes, by channel; what is wrong with
// channel or to goes to errs.
func (s *Server) sendDestination(channel, to string, errs map[string]string) guard.Destination {
	var dest guard.Destination
	switch ch := message.Channel(channel); ch {
	case message.Email, message.SMS:
		var err error
		if dest, err = identity.ParseDestination(ch, to, s.policy); err != nil {
			errs["to"] = reason(err)
		}
	case "":
		errs["channel"] = "required: email or sms"
	default:
		errs["channel"] = "must be email or sms"
	}
	return dest
}

// sendFailed answers a send the sender could not make: a destination the
// provider refuses counts; a provider's failure gives the units back.
func (s *Server) sendFailed(ctx context.Context, w http.ResponseWriter, rec *record, req guard.Request, dest guard.Destination, err error) {
	wait, full := queueFull(err)
	if !full {
		// (a full queue's refusals: the queue logs the fullness, paced)
		s.Log.ErrorContext(ctx, "send message", "channel", dest.Channel, "err", err)
	}
	if errors.Is(err, message.ErrUndeliverable) {
		// The provider refuses the destination itself: the attempt
		// counts, or trying refused numbers would cost nothing.
		s.fail(w, rec, invalidRequest(map[string]string{"to": "the message provider refuses this destination"}))
		return
	}
	// The provider failed (an outage, throttling): not the sender's
	// doing, and a retry after the provider recovers must not find the
	// budgets (sms-global among them) spent on messages never sent.
	s.settle(ctx, req, rec.decision, guard.Void)
	p := problem("delivery_unavailable", "the message provider failed; retry later")
	if full {
		p = problem("delivery_unavailable", "too many messages are waiting for the provider; retry later")
		p.RetryAfter = max(1, int(wait/time.Second))
	}
	s.fail(w, rec, p)
}

// queueFull is the wait a full queue's refusal (see Roomer) gives, and
// whether err is one.
func queueFull(err error) (time.Duration, bool) {
	var full interface{ RetryIn() time.Duration }
	if errors.As(err, &full) {
		return full.RetryIn(), true
	}
	return 0, false
}

// sendAnswer writes a send's 202: where the code went, its lifetime, the
// resend pace, and the queue's estimate when it waits in one.
func (s *Server) sendAnswer(ctx context.Context, w http.ResponseWriter, dest guard.Destination) {
	out := sendResponse{
		Status: "pending", Channel: string(dest.Channel), To: mask(dest),
		ExpiresIn: int(s.Codes.TTL() / time.Second), ResendIn: s.resend,
	}
	if q, ok := s.Sender.(Queuer); ok {
		out.Queued = true
		out.DeliveryEta = int(q.Backlog(ctx, dest.Channel) / time.Second)
	}
	writeJSON(w, http.StatusAccepted, out)
}

func (s *Server) handleVerify(w http.ResponseWriter, r *http.Request) {
	rec := newRecord("otp.verify")
	defer s.logDecision(r.Context(), rec)
	var in struct{ To, Purpose, Code, DeviceToken string }
	if p := decode(w, r, fields{"to": &in.To, "purpose": &in.Purpose, "code": &in.Code, "deviceToken": &in.DeviceToken}); p != nil {
		s.fail(w, rec, p)
		return
	}
	errs := map[string]string{}
	s.checkPurpose(in.Purpose, errs)
	dest, err := identity.GuessDestination(in.To, s.policy)
	if err != nil {
		errs["to"] = reason(err)
	}
	if n := s.Codes.Length(); len(in.Code) != n || !allDigits(in.Code) {
		errs["code"] = "must be " + strconv.Itoa(n) + " digits"
	}
	if s.Tokens == nil {
		s.fail(w, rec, problem("not_ready", "this deployment signs no tokens here"))
		return
	}
	req, p := s.admit(r, rec, otpRequest("otp.verify", dest, in.Purpose), "destination", dest.Key, errs)
	if p != nil {
		s.fail(w, rec, p)
		return
	}
	ctx := r.Context()
	v, err := s.Codes.Verify(ctx, dest, in.Purpose, in.Code)
	check, now := v.Check, v.At
	if err != nil {
		s.Log.ErrorContext(ctx, "check code", "err", err)
		s.settle(ctx, req, rec.decision, guard.Void)
		s.fail(w, rec, storeUnavailable())
		return
	}
	s.settleVerify(ctx, req, rec, v)
	if check != otp.Approved {
		rec.outcome = "invalid_code:" + check.String()
		s.fail(w, rec, problem("invalid_code", "the code is wrong, expired or already used"))
		return
	}
	if c, ok := s.Auth.(Confirmer); ok && in.Purpose == "signup" {
		if err := c.Confirm(context.WithoutCancel(ctx), dest.Address); err != nil {
			s.Log.ErrorContext(ctx, "confirm the account", "err", err)
		}
	}
	s.approve(ctx, w, r, rec, dest, in.Purpose, in.DeviceToken, now)
}

// settleVerify settles a verify by its code's check: an approved code's
// send too, a guess at no code as a stray.
func (s *Server) settleVerify(ctx context.Context, req guard.Request, rec *record, v otp.Verdict) {
	switch v.Check {
	case otp.Approved:
		s.settle(ctx, req, rec.decision, guard.Success)
		// the send that issued the code was real: its failure goes back
		if err := s.Guard.SettleReceipt(context.WithoutCancel(ctx), v.Receipt, guard.Success); err != nil {
			s.Log.ErrorContext(ctx, "settle the send", "err", err)
		}
	case otp.Missing:
		// A guess at no code gains nothing and costs the owner nothing:
		// it counts against the IP, not the destination.
		s.settle(ctx, req, rec.decision, guard.Stray)
	default:
		s.settle(ctx, req, rec.decision, guard.Failure)
	}
}

// approve answers an approved code: the signed token and, for the
// purposes that trust devices, the device token.
func (s *Server) approve(ctx context.Context, w http.ResponseWriter, r *http.Request, rec *record, dest guard.Destination, purpose, deviceToken string, now time.Time) {
	tok, err := s.Tokens.Sign(now, dest.Address, purpose, string(dest.Channel), token.OTP)
	if err != nil {
		s.Log.ErrorContext(ctx, "sign token", "err", err)
		s.fail(w, rec, problem("internal_error", "the token could not be signed"))
		return
	}
	out := verifyResponse{Status: "approved", Token: tok}
	if devicePurpose(purpose) {
		out.DeviceToken = s.deviceToken(ctx, w, dest.Address, presentedDevice(r, deviceToken), now)
	}
	rec.outcome = "approved"
	writeJSON(w, http.StatusOK, out)
}

// message is the code's message to dest, rendered from templates/.
func (s *Server) message(dest guard.Destination, purpose, locale, code string) (message.Message, error) {
	content, err := templates.Render(string(dest.Channel), locale, templates.Data{Code: code, Purpose: purpose, TTL: s.Codes.TTL()})
	if err != nil {
		return message.Message{}, err
	}
	return message.Message{
		Channel: dest.Channel, To: dest.Address, Purpose: purpose, Locale: templates.Match(locale), Code: code,
		Subject: content.Subject, Text: content.Text, HTML: content.HTML, TTL: s.Codes.TTL(),
	}, nil
}

// numbered makes msg, the message of the code issued for (dest,
// purpose), one of its slot: a newer send's message supersedes it while
// it waits in a queue.
func numbered(msg *message.Message, dest guard.Destination, purpose string, issued otp.Issued) {
	msg.Slot, msg.Version, msg.CodeKey = codeSlot(dest, purpose), issued.Version, issued.Key
}

// codeSlot is the delivery queue's slot of a code the code store keeps
// for (dest, purpose): a newer send's message supersedes a waiting one.
func codeSlot(dest guard.Destination, purpose string) string {
	return "otp\x00" + dest.Address + "\x00" + purpose // the code's own key (guard/otp)
}

func otpRequest(action string, dest guard.Destination, purpose string) guard.Request {
	return guard.Request{
		Action:     action,
		Subject:    guard.Subject{Destination: dest},
		Attributes: map[string]string{"channel": string(dest.Channel), "purpose": purpose},
	}
}

func (s *Server) handleJWKS(w http.ResponseWriter, _ *http.Request) {
	if s.Tokens == nil {
		problem("not_found", "this deployment publishes no keys here").write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeBody(w, s.Tokens.JWKS())
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.Config.Store.Timeout)
	defer cancel()
	if err := s.Health(ctx); err != nil {
		problem("store_unavailable", "the store does not answer").write(w)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) checkPurpose(purpose string, errs map[string]string) {
	switch {
	case purpose == "":
		errs["purpose"] = "required: one of " + strings.Join(s.Config.OTP.Purposes, ", ")
	case !slices.Contains(s.Config.OTP.Purposes, purpose):
		errs["purpose"] = "must be one of " + strings.Join(s.Config.OTP.Purposes, ", ")
	}
}

// resendPace is resendIn: the window divided by the limit of the send
// rule keyed on destination alone that allows sends most slowly over its
// shortest window, in whole seconds. It describes the configuration, the
// same for every send, so a caller learns nothing from it about sends
// someone else made to the address (a count-based answer would).
func resendPace(c config.Config) int {
	var pace time.Duration
	var window time.Duration
	for _, r := range c.Rules {
		if r.Action != "otp.send" || r.Mode == guard.ModeShadow || len(r.Key) != 1 || r.Key[0] != "destination" {
			continue
		}
		if window == 0 || r.Window < window {
			window, pace = r.Window, r.Window/time.Duration(r.Limit)
		}
	}
	return int((pace + time.Second - 1) / time.Second)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
