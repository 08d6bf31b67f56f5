// Package api is otpguard's HTTP API: one http.Handler serves the local
// server and, behind the API Gateway adapter, every Lambda function.
//
// Every answer is JSON; every error is application/problem+json with a
// machine-readable code (see [Problem]). Request bodies must be
// application/json (else 415), so a page on another origin cannot make a
// browser post to the API without a CORS preflight, and preflights pass
// only for network.allowedOrigins. Unclean paths (//v1/otp/send,
// /v1/otp/send/) are 404, never redirects. Each request to a guarded
// route writes one decision record to the log: the action, the rules
// evaluated, the outcome and keyed-hash fingerprints of the subject, never
// a code, a password or a clear identifier.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/token"
)

// Queuer is a Sender that queues (DeliveryMode queue): a nil error from
// Send means the message waits its turn; Backlog estimates how long a
// message of the channel waits behind the others (0: none ahead).
type Queuer interface {
	message.Sender
	Backlog(ctx context.Context, ch message.Channel) time.Duration
}

// Roomer is a Sender that can be full (the queue over its depth cap):
// Room answers the error Send would answer now for a message of ch (a
// *Full), or gives the message a place, which release gives back (where
// the queue holds places: the in-process queue; its first call does, any
// later one nothing). A send asks before it replaces the address's code,
// so a send refused for want of room leaves the code the owner has; it
// then sends under WithRoomChecked, and Send does not ask again. The
// caller releases the place too (deferred), for when it sends nothing.
type Roomer interface {
	Room(ctx context.Context, ch message.Channel) (release func(), err error)
}

type roomCheckedKey struct{}

// WithRoomChecked tells a Roomer's Send that its caller asked for room
// (Room) before it stored the message's code, and holds the place release
// gives back: Send does not ask again (a second answer, from a depth read
// again in between, could refuse the message after its code had replaced
// the one the owner has), and gives the place back once the message is
// queued.
func WithRoomChecked(ctx context.Context, release func()) context.Context {
	return context.WithValue(ctx, roomCheckedKey{}, release)
}

// RoomChecked is the release of the place ctx's caller holds, and whether
// it carries WithRoomChecked.
func RoomChecked(ctx context.Context) (release func(), checked bool) {
	release, checked = ctx.Value(roomCheckedKey{}).(func())
	return release, checked && release != nil
}

// Authenticator checks credentials and creates accounts for /v1/login and
// /v1/signup: the local users, Cognito, or the app's own endpoints. Errors
// wrap authn.ErrInvalidCredentials, authn.ErrRejected or
// authn.ErrUnavailable.
type Authenticator interface {
	Login(ctx context.Context, l authn.Login) (authn.LoginResult, error)
	// SignUp creates an account; for an address already registered it
	// changes nothing and returns nil, as for a new one.
	SignUp(ctx context.Context, s authn.SignUp) error
}

// Confirmer is an authenticator whose accounts are confirmed by a code
// sent to their address (the local users): a signup sends a code of
// purpose signup, and its approval through /v1/otp/verify confirms the
// account.
type Confirmer interface {
	Confirm(ctx context.Context, address string) error
}

// Observer is told every decision, for metrics.
type Observer interface {
	// Observe is called once per guarded request with the action, the
	// request's outcome (sent, approved, rate_limited, ...) and the
	// decision (zero when the request was refused before deciding).
	Observe(ctx context.Context, action, outcome string, d guard.Decision)
}

// SendObserver is an Observer that is also told each message delivered:
// its channel and, for SMS, the destination's country (the cost proxy).
type SendObserver interface {
	Sent(ctx context.Context, channel, country string)
}

// SubjectObserver is an Observer that is also told each decision's
// subject, as its keyed fingerprint (the console's near-limit subjects).
type SubjectObserver interface {
	ObserveSubject(ctx context.Context, action, subject string, d guard.Decision)
}

// LatencyObserver is an Observer that is also told each guarded
// request's time.
type LatencyObserver interface {
	Latency(ctx context.Context, action string, d time.Duration)
}

// delivered tells the observer of a message delivered to dest.
func (s *Server) delivered(ctx context.Context, dest guard.Destination) {
	if o, ok := s.Observer.(SendObserver); ok {
		o.Sent(ctx, string(dest.Channel), dest.Country)
	}
}

// ChallengeObserver is an Observer that is also told how the proofs that
// challenge rules asked for ended: passed or failed.
type ChallengeObserver interface {
	Challenge(ctx context.Context, action, rule, outcome string)
}

// proved tells the observer how a challenge rule's proof ended.
func (s *Server) proved(ctx context.Context, action, rule string, passed bool) {
	if o, ok := s.Observer.(ChallengeObserver); ok && rule != "" {
		outcome := "failed"
		if passed {
			outcome = "passed"
		}
		o.Challenge(ctx, action, rule, outcome)
	}
}

// Deps is what the API is built on; the composition root builds them.
type Deps struct {
	Config config.Config
	Guard  *guard.Guard
	Codes  *otp.Codes
	// Tokens signs the verify route's tokens (and the local users' login
	// tokens) and serves the JWKS; nil where nothing is signed (a Lambda
	// function that may not read the signing key): those routes answer
	// 503 not_ready, the JWKS 404, before anything is consumed.
	Tokens *token.Signer
	// Sender delivers codes; nil in the functions that send nothing.
	Sender message.Sender
	// Auth fronts login and signup; nil answers them 503.
	Auth Authenticator
	// Admin reports whether a request may use the internal routes (a
	// bearer token locally, the IAM authorizer in AWS); nil refuses all.
	Admin func(*http.Request) bool
	// Health reports whether the store answers (GET /healthz).
	Health func(context.Context) error
	// Log receives the decision records; nil discards them.
	Log *slog.Logger
	// Observer, when set, is told every decision.
	Observer Observer
	// Blobs holds challenged logins and spent CAPTCHA tokens; nil where
	// no rule challenges (a challenged login then takes its rule's
	// fallback).
	Blobs Blobs
	// Captcha verifies CAPTCHA tokens (challenge.captcha); nil when none
	// is configured.
	Captcha Captcha
	// Events receives the security events (guard/events); nil sends none.
	Events events.Publisher
	// Caller names who made an internal request (the IAM principal on
	// AWS), for the Admin Unblock event; nil: "".
	Caller func(*http.Request) string
}

// Server is the API. Build it with [NewServer].
type Server struct {
	Deps
	trusted []netip.Prefix
	policy  identity.PhonePolicy
	origins []string
	mux     *http.ServeMux
	resend  int // resendIn, seconds: see sendResponse
	// published remembers the security events this process saw published
	// (dedup key -> unix ns until which it stands), so that a denial
	// repeated under attack does not ask Redis each time; Redis's mark
	// alone decides whether an event goes out.
	published sync.Map
	stores    atomic.Int64 // published's stores, for its sweep
}

// NewServer returns the API's handler.
func NewServer(d Deps) (*Server, error) {
	switch {
	case d.Guard == nil || d.Codes == nil || d.Health == nil:
		return nil, errors.New("api: Guard, Codes and Health are required")
	case d.Log == nil:
		d.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{Deps: d, trusted: d.Config.TrustedProxyPrefixes(), policy: d.Config.OTP.SMS.Policy(),
		origins: d.Config.Network.AllowedOrigins, mux: http.NewServeMux(), resend: resendPace(d.Config)}
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
			// the route's pattern (set once the mux matched it), never the
			// path, which may hold an identifier; of the panic's value, a
			// runtime error's text (which holds no input) or else its type
			what := fmt.Sprintf("%T", v)
			if re, ok := v.(runtime.Error); ok {
				what = re.Error()
			}
			s.Log.ErrorContext(r.Context(), "panic", "method", r.Method, "route", r.Pattern, "panic", what)
			problem("internal_error", "the server failed; the failure is logged").write(w)
		}
	}()
	// An unclean path is no route of ours: never redirect it (the mux
	// would), so no client is taught to follow us elsewhere.
	if p := r.URL.Path; p == "" || p[0] != '/' || path.Clean(p) != p {
		problem("not_found", "no such route").write(w)
		return
	}
	if !s.cors(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// cors answers what browsers ask: a listed origin gets its
// Access-Control-Allow-Origin on the public routes, and its preflights
// pass; any other origin's preflight is refused (403). It reports whether
// the request goes on to its route.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	public := isPublic(r.URL.Path)
	allowed := public && slices.Contains(s.origins, origin)
	w.Header().Add("Vary", "Origin")
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	switch {
	case preflight && !allowed:
		forbidden("this origin may not call the API from a browser (network.allowedOrigins)").write(w)
		return false
	case preflight:
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Methods", "GET, POST")
		h.Set("Access-Control-Allow-Headers", "Content-Type, X-Device-Token")
		// the og_device cookie rides on credentialed requests (fetch
		// with credentials: "include") from the allowed origins
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return false
	case allowed:
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Set("Access-Control-Expose-Headers", "X-Device-Token, Retry-After")
	}
	return true
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

// isPublic reports whether a path is a browser-facing route.
func isPublic(p string) bool {
	return !strings.HasPrefix(p, "/v1/decisions") && !strings.HasPrefix(p, "/v1/outcomes") && !strings.HasPrefix(p, "/v1/blocks/") &&
		!strings.HasPrefix(p, "/v1/devices/")
}
