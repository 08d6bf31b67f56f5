// Package api is otpguard's HTTP API: one http.Handler serves the local
// server and, behind the API Gateway adapter, every Lambda function.
//
// Every answer is JSON; every error is application/problem+json with a
// machine-readable code (see [Problem]). Each request to a guarded route
// writes one decision record to the log: the action, the rules evaluated,
// the outcome and keyed-hash fingerprints of the subject, never a code or
// a clear identifier.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/token"
)

// Sender delivers a rendered message. It wraps guard.ErrUndeliverable or
// guard.ErrDeliveryUnavailable so the API can answer clearly, and never
// puts the code in an error.
type Sender interface {
	Send(ctx context.Context, m guard.Message) error
}

// Observer is told every decision, for metrics.
type Observer interface {
	// Observe is called once per guarded request with the action, the
	// request's outcome (sent, approved, rate_limited, ...) and the
	// decision (zero when the request was refused before deciding).
	Observe(ctx context.Context, action, outcome string, d guard.Decision)
}

// Deps is what the API is built on; main builds them.
type Deps struct {
	Config guard.Config
	Guard  *guard.Guard
	Codes  *otp.Codes
	Tokens *token.Signer
	Sender Sender
	// Health reports whether the store answers (GET /healthz).
	Health func(context.Context) error
	// Log receives the decision records; nil discards them.
	Log *slog.Logger
	// Observer, when set, is told every decision.
	Observer Observer
}

// Server is the API. Build it with [NewServer].
type Server struct {
	Deps
	trusted []netip.Prefix
	policy  guard.PhonePolicy
	mux     *http.ServeMux
}

// NewServer returns the API's handler.
func NewServer(d Deps) (*Server, error) {
	switch {
	case d.Guard == nil || d.Codes == nil || d.Tokens == nil || d.Sender == nil || d.Health == nil:
		return nil, errors.New("api: Guard, Codes, Tokens, Sender and Health are required")
	case d.Log == nil:
		d.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{Deps: d, trusted: d.Config.TrustedProxyPrefixes(), policy: d.Config.PhonePolicy(), mux: http.NewServeMux()}
	s.routes()
	return s, nil
}

// ServeHTTP implements http.Handler; a panic becomes a 500 problem.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.Log.ErrorContext(r.Context(), "panic", "path", r.URL.Path, "panic", v)
			problem("internal_error", "the server failed; the failure is logged").write(w)
		}
	}()
	s.mux.ServeHTTP(w, r)
}

type requestIDKey struct{}

// WithRequestID attaches the platform's request id (Lambda's) to ctx; the
// decision records carry it.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
