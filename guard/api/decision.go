package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard"
)

// record is one request's decision record, logged when the handler ends.
type record struct {
	action   string
	outcome  string
	subject  string // fingerprint of the destination or account
	ip       string // fingerprint of the client address
	decision guard.Decision
	start    time.Time
	account  string // the normalized account, where a trigger needs it again
}

func newRecord(action string) *record { return &record{action: action, start: time.Now()} }

// admit completes req with the client IP, notes its fingerprints in rec
// and asks the guard. It returns the 400 for errs (to which it may add),
// or the 429 or 503 of a denial.
func (s *Server) admit(r *http.Request, rec *record, req guard.Request, subjectDim, subjectValue string, errs map[string]string) (guard.Request, *Problem) {
	ip, ok := clientIP(r, s.trusted)
	if !ok {
		errs["ip"] = "the client address cannot be determined"
	}
	if len(errs) > 0 {
		return req, invalidRequest(errs)
	}
	req.Subject.IP = ip
	rec.subject, rec.ip = s.Guard.Fingerprint(subjectDim, subjectValue), s.Guard.Fingerprint("ip", ip.String())
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
	case err != nil && ctx.Err() != nil:
		// the client hung up: not a store failure, and nothing goes on
		return d, problem("cancelled", "the client closed the request")
	case err != nil:
		s.Log.ErrorContext(ctx, "decide", "action", req.Action, "err", err)
		return d, storeUnavailable()
	case d.Allowed:
		if d.StoreError != nil {
			s.Log.WarnContext(ctx, "store unavailable; the in-process backstop decided", "action", req.Action, "err", d.StoreError)
		}
		return d, nil
	case d.StoreError != nil && !backstopDenied(d):
		s.Log.ErrorContext(ctx, "store unavailable", "action", req.Action, "err", d.StoreError)
		return d, storeUnavailable()
	}
	s.budgetEvent(ctx, req.Action, req, d)
	return d, rateLimited(d.DeniedBy, d.RetryAfter)
}

// backstopDenied reports a denial by the in-process backstop's own count
// (a rule with onStoreError allow): a 429 like any other, where a rule that
// denies on store errors answers 503.
func backstopDenied(d guard.Decision) bool {
	for _, r := range d.Rules {
		if r.Rule == d.DeniedBy {
			return r.Backstop
		}
	}
	return false
}

// settle reports an admitted attempt's outcome. It outlives the request:
// net/http cancels a request's context when its client hangs up, and a
// success must still give its attempt back, a void attempt its units, a
// failure its strike (the store timeout bounds it). A failure to record
// is logged, never shown to the caller.
func (s *Server) settle(ctx context.Context, req guard.Request, d guard.Decision, o guard.Outcome) []guard.Result {
	res, err := s.Guard.Settle(context.WithoutCancel(ctx), req, d, o)
	if err != nil {
		s.Log.ErrorContext(ctx, "settle", "action", req.Action, "err", err)
	}
	if o == guard.Failure {
		s.lockoutEvents(ctx, req, d, res)
	}
	return res
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
		if o, ok := s.Observer.(LatencyObserver); ok {
			o.Latency(ctx, rec.action, time.Since(rec.start))
		}
		if o, ok := s.Observer.(SubjectObserver); ok && rec.subject != "" {
			o.ObserveSubject(ctx, rec.action, rec.subject, rec.decision)
		}
	}
	if !s.Log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs,
		slog.String("action", rec.action),
		slog.String("outcome", rec.outcome),
		slog.Bool("allowed", rec.decision.Allowed),
		slog.String("deniedBy", rec.decision.DeniedBy),
		slog.String("subject", rec.subject),
		slog.String("ip", rec.ip),
		slog.String("rules", ruleLog(rec.decision.Rules)),
		slog.Bool("storeError", rec.decision.StoreError != nil),
		slog.Float64("ms", float64(time.Since(rec.start).Microseconds())/1000),
	)
	if id := requestID(ctx); id != "" {
		attrs = append(attrs, slog.String("requestId", id))
	}
	s.Log.LogAttrs(ctx, slog.LevelInfo, "decision", attrs...)
}

// ruleLog is the rules of a decision in one compact string:
// name=allowed/remaining, with the marks locked, skipped, cached, leased,
// shadow and store_error.
func ruleLog(rs []guard.Result) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.Rule)
		b.WriteByte('=')
		switch {
		case r.Skipped:
			b.WriteString("skipped")
			continue
		case r.Allowed:
			b.WriteString("allowed/")
		default:
			b.WriteString("denied/")
		}
		b.WriteString(itoa(r.Remaining))
		for _, m := range []struct {
			on   bool
			name string
		}{{r.Locked, "locked"}, {r.Cached, "cached"}, {r.Leased, "leased"}, {r.Mode == guard.ModeShadow, "shadow"}, {r.StoreError, "store_error"}} {
			if m.on {
				b.WriteByte('/')
				b.WriteString(m.name)
			}
		}
	}
	return b.String()
}

// reason is an identifier error without its "invalid input: " prefix.
func reason(err error) string {
	return strings.TrimPrefix(err.Error(), guard.ErrInvalidInput.Error()+": ")
}
