package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/templates"
)

// sendResponse is the 202 of POST /v1/otp/send.
type sendResponse struct {
	Status  string `json:"status"`
	Channel string `json:"channel"`
	To      string `json:"to"`
	// ExpiresIn is the code's lifetime in seconds.
	ExpiresIn int `json:"expiresIn"`
	// ResendIn is how many seconds until another send to this destination
	// would be allowed; 0 when it would be now.
	ResendIn int `json:"resendIn"`
}

// verifyResponse is the 200 of POST /v1/otp/verify.
type verifyResponse struct {
	Status string `json:"status"`
	Token  string `json:"token"`
}

// record is one request's decision record, logged when the handler ends.
type record struct {
	action   string
	outcome  string
	subject  string // fingerprints
	ip       string
	decision guard.Decision
	start    time.Time
}

func (s *Server) handleSend(w http.ResponseWriter, r *http.Request) {
	rec := &record{action: "otp.send", start: time.Now()}
	defer s.logDecision(r.Context(), rec)
	var in struct{ Channel, To, Purpose, Locale string }
	if p := decode(w, r, map[string]any{"channel": &in.Channel, "to": &in.To, "purpose": &in.Purpose, "locale": &in.Locale}); p != nil {
		s.fail(w, rec, p)
		return
	}
	errs := map[string]string{}
	s.checkPurpose(in.Purpose, errs)
	var dest guard.Destination
	switch ch := guard.Channel(in.Channel); ch {
	case guard.Email, guard.SMS:
		var err error
		if dest, err = guard.ParseDestination(ch, in.To, s.policy); err != nil {
			errs["to"] = reason(err)
		}
	case "":
		errs["channel"] = "required: email or sms"
	default:
		errs["channel"] = "must be email or sms"
	}
	if !templates.ValidLocale(in.Locale) {
		errs["locale"] = "must be a BCP 47 language tag such as en or fr-CA"
	}
	_, p := s.admit(r, rec, "otp.send", dest, in.Purpose, errs)
	if p != nil {
		s.fail(w, rec, p)
		return
	}
	code, err := s.Codes.Issue(r.Context(), dest, in.Purpose)
	if err != nil {
		s.Log.ErrorContext(r.Context(), "issue code", "err", err)
		s.fail(w, rec, storeUnavailable())
		return
	}
	content, err := templates.Render(string(dest.Channel), in.Locale, templates.Data{Code: code, Purpose: in.Purpose, TTL: s.Codes.TTL()})
	if err != nil {
		s.Log.ErrorContext(r.Context(), "render message", "err", err)
		s.fail(w, rec, problem("internal_error", "the message could not be rendered"))
		return
	}
	msg := guard.Message{
		Channel: dest.Channel, To: dest.Address, Purpose: in.Purpose, Locale: templates.Match(in.Locale), Code: code,
		Subject: content.Subject, Text: content.Text, HTML: content.HTML,
	}
	if err := s.Sender.Send(r.Context(), msg); err != nil {
		s.Log.ErrorContext(r.Context(), "send message", "channel", dest.Channel, "err", err)
		if errors.Is(err, guard.ErrUndeliverable) {
			s.fail(w, rec, invalidRequest(map[string]string{"to": "the message provider refuses this destination"}))
			return
		}
		s.fail(w, rec, problem("delivery_unavailable", "the message provider failed; retry later"))
		return
	}
	rec.outcome = "sent"
	writeJSON(w, http.StatusAccepted, sendResponse{
		Status: "pending", Channel: string(dest.Channel), To: mask(dest),
		ExpiresIn: int(s.Codes.TTL() / time.Second), ResendIn: resendIn(rec.decision),
	})
}

func (s *Server) handleVerify(w http.ResponseWriter, r *http.Request) {
	rec := &record{action: "otp.verify", start: time.Now()}
	defer s.logDecision(r.Context(), rec)
	var in struct{ To, Purpose, Code string }
	if p := decode(w, r, map[string]any{"to": &in.To, "purpose": &in.Purpose, "code": &in.Code}); p != nil {
		s.fail(w, rec, p)
		return
	}
	errs := map[string]string{}
	s.checkPurpose(in.Purpose, errs)
	dest, err := guard.GuessDestination(in.To, s.policy)
	if err != nil {
		errs["to"] = reason(err)
	}
	if n := s.Codes.Length(); len(in.Code) != n || !allDigits(in.Code) {
		errs["code"] = "must be " + strconv.Itoa(n) + " digits"
	}
	req, p := s.admit(r, rec, "otp.verify", dest, in.Purpose, errs)
	if p != nil {
		s.fail(w, rec, p)
		return
	}
	check, now, err := s.Codes.Verify(r.Context(), dest, in.Purpose, in.Code)
	if err != nil {
		s.Log.ErrorContext(r.Context(), "check code", "err", err)
		s.fail(w, rec, storeUnavailable())
		return
	}
	if check != otp.Approved {
		if _, err := s.Guard.Record(r.Context(), req, guard.Failure); err != nil {
			s.Log.ErrorContext(r.Context(), "record failure", "err", err)
		}
		rec.outcome = "invalid_code:" + check.String()
		s.fail(w, rec, problem("invalid_code", "the code is wrong, expired or already used"))
		return
	}
	if _, err := s.Guard.Record(r.Context(), req, guard.Success); err != nil {
		s.Log.ErrorContext(r.Context(), "record success", "err", err)
	}
	tok, err := s.Tokens.Sign(now, dest.Address, in.Purpose, string(dest.Channel))
	if err != nil {
		s.Log.ErrorContext(r.Context(), "sign token", "err", err)
		s.fail(w, rec, problem("internal_error", "the token could not be signed"))
		return
	}
	rec.outcome = "approved"
	writeJSON(w, http.StatusOK, verifyResponse{Status: "approved", Token: tok})
}

func (s *Server) handleJWKS(w http.ResponseWriter, _ *http.Request) {
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

// admit completes the guard request with the client IP and asks the
// guard, noting the subject and decision in rec. It returns the 400 for
// errs (to which it may add), or the 429 or 503 of a denial.
func (s *Server) admit(r *http.Request, rec *record, action string, dest guard.Destination, purpose string, errs map[string]string) (guard.Request, *Problem) {
	ip, ok := clientIP(r, s.trusted)
	if !ok {
		errs["ip"] = "the client address cannot be determined"
	}
	if len(errs) > 0 {
		return guard.Request{}, invalidRequest(errs)
	}
	req := guard.Request{
		Action:     action,
		Subject:    guard.Subject{Destination: dest, IP: ip},
		Attributes: map[string]string{"channel": string(dest.Channel), "purpose": purpose},
	}
	rec.subject, rec.ip = s.Guard.Fingerprint("destination", dest.Key), s.Guard.Fingerprint("ip", ip.String())
	d, p := s.decide(r.Context(), req)
	rec.decision = d
	return req, p
}

// decide asks the guard; a denial becomes a 429, a store failure that the
// rules' onStoreError deny turns into a 503.
func (s *Server) decide(ctx context.Context, req guard.Request) (guard.Decision, *Problem) {
	d, err := s.Guard.Allow(ctx, req)
	switch {
	case errors.Is(err, guard.ErrInvalidInput):
		return d, invalidRequest(map[string]string{"body": reason(err)})
	case err != nil:
		s.Log.ErrorContext(ctx, "decide", "action", req.Action, "err", err)
		return d, storeUnavailable()
	case d.Allowed:
		return d, nil
	case d.StoreError != nil:
		s.Log.ErrorContext(ctx, "store unavailable", "action", req.Action, "err", d.StoreError)
		return d, storeUnavailable()
	}
	return d, rateLimited(d.DeniedBy, d.RetryAfter)
}

func (s *Server) checkPurpose(purpose string, errs map[string]string) {
	switch {
	case purpose == "":
		errs["purpose"] = "required: one of " + strings.Join(s.Config.OTP.Purposes, ", ")
	case !slices.Contains(s.Config.OTP.Purposes, purpose):
		errs["purpose"] = "must be one of " + strings.Join(s.Config.OTP.Purposes, ", ")
	}
}

// fail writes p and notes it as the request's outcome.
func (s *Server) fail(w http.ResponseWriter, rec *record, p *Problem) {
	if rec.outcome == "" {
		rec.outcome = p.Code
	}
	p.write(w)
}

// logDecision writes the request's decision record and tells the
// observer.
func (s *Server) logDecision(ctx context.Context, rec *record) {
	outcome, _, _ := strings.Cut(rec.outcome, ":")
	if s.Observer != nil {
		s.Observer.Observe(ctx, rec.action, outcome, rec.decision)
	}
	attrs := []slog.Attr{
		slog.String("action", rec.action),
		slog.String("outcome", rec.outcome),
		slog.Bool("allowed", rec.decision.Allowed),
		slog.String("deniedBy", rec.decision.DeniedBy),
		slog.String("subject", rec.subject),
		slog.String("ip", rec.ip),
		slog.Any("rules", ruleLog(rec.decision.Rules)),
		slog.Bool("storeError", rec.decision.StoreError != nil),
		slog.Float64("ms", float64(time.Since(rec.start).Microseconds())/1000),
	}
	if id := requestID(ctx); id != "" {
		attrs = append(attrs, slog.String("requestId", id))
	}
	s.Log.LogAttrs(ctx, slog.LevelInfo, "decision", attrs...)
}

type ruleEntry struct {
	Name      string `json:"name"`
	Mode      string `json:"mode"`
	Allowed   bool   `json:"allowed"`
	Remaining int64  `json:"remaining"`
}

func ruleLog(rs []guard.Result) []ruleEntry {
	out := make([]ruleEntry, len(rs))
	for i, r := range rs {
		out[i] = ruleEntry{r.Rule, r.Mode, r.Allowed, r.Remaining}
	}
	return out
}

// resendIn is the longest wait among the exhausted enforcing rules.
func resendIn(d guard.Decision) int {
	var wait time.Duration
	for _, r := range d.Rules {
		if r.Remaining == 0 && r.Mode != guard.ModeShadow {
			wait = max(wait, r.ResetAfter)
		}
	}
	return int((wait + time.Second - 1) / time.Second)
}

// reason is an identifier error without its "invalid input: " prefix.
func reason(err error) string {
	return strings.TrimPrefix(err.Error(), guard.ErrInvalidInput.Error()+": ")
}

var digits = regexp.MustCompile(`^[0-9]+$`)

func allDigits(s string) bool { return digits.MatchString(s) }
