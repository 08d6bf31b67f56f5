package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/password"
	"github.com/otpguard/otpguard/guard/token"
)

// MaxPassword bounds a password in code points (NIST 800-63B asks for at
// least 64; longer only feeds the hash).
const MaxPassword = password.MaxLength

// loginResponse is the 200 of POST /v1/login for the local users.
type loginResponse struct {
	Status string `json:"status"`
	Token  string `json:"token,omitempty"`
	// DeviceToken is the account's trusted device token (also the
	// og_device cookie).
	DeviceToken string `json:"deviceToken,omitempty"`
}

// handleLogin fronts the authenticator. The login rules decide first; a
// denied attempt never reaches the authenticator (the password is not
// checked at all). An admitted attempt counts as a failure until it
// succeeds (race-safe: 50 parallel wrong passwords against a limit of 5
// get at most 5 answers of 401); an authenticator failure is not counted.
func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	rec := newRecord("login")
	defer s.logDecision(r.Context(), rec)
	var in struct{ Username, Password, DeviceToken string }
	body, p := s.body(w, r, fields{"username": &in.Username, "password": &in.Password, "deviceToken": &in.DeviceToken})
	if p != nil {
		s.fail(w, rec, p)
		return
	}
	errs := map[string]string{}
	account, err := identity.ParseAccount(in.Username)
	if err != nil {
		errs["username"] = reason(err)
	}
	if in.Password == "" {
		errs["password"] = "required"
	} else if utf8.RuneCountInString(in.Password) > MaxPassword {
		errs["password"] = "must be at most 256 characters"
	}
	if s.Auth == nil {
		s.fail(w, rec, problem("upstream_unavailable", "this deployment fronts no authenticator"))
		return
	}
	presented := presentedDevice(r, in.DeviceToken)
	req, p := s.admit(r, rec, guard.Request{Action: "login", Subject: guard.Subject{Account: account}, Device: presented}, "account", account, errs)
	if p != nil {
		s.fail(w, rec, p)
		return
	}
	ctx := r.Context()
	res, err := s.Auth.Login(ctx, authn.Login{
		Account: account, Username: in.Username, Password: in.Password, Body: body,
		ClientIP: req.Subject.IP, UserAgent: r.UserAgent(),
	})
	if s.loginFailed(ctx, w, rec, req, err) {
		return
	}
	d := rec.decision
	switch {
	case d.Challenged && res.Challenge == nil:
		// a challenge rule flagged the login and the password is right:
		// the result waits for a step-up code
		s.stepUp(ctx, w, rec, req, account, presented, res)
		return
	case d.Challenged:
		// the authenticator asks for its own proof (MFA, a new password),
		// answered without us: the password was right, but nothing a
		// challenge held back is committed on a proof we do not see
		d.Rules = slices.Clone(d.Rules)
		for i := range d.Rules {
			d.Rules[i].Challenged = false
		}
	}
	s.settle(ctx, req, d, guard.Success)
	s.loginAnswer(ctx, w, rec, account, presented, res, rec.decision.At)
}

// loginFailed answers a login whose password was wrong (a failure) or
// that the authenticator did not answer (nothing counts); false: err is
// nil.
func (s *Server) loginFailed(ctx context.Context, w http.ResponseWriter, rec *record, req guard.Request, err error) bool {
	switch {
	case errors.Is(err, authn.ErrInvalidCredentials):
		s.settle(ctx, req, rec.decision, guard.Failure)
		s.fail(w, rec, problem("invalid_credentials", "the username or password is wrong"))
		return true
	case err != nil:
		s.Log.ErrorContext(ctx, "authenticate", "err", err)
		s.settle(ctx, req, rec.decision, guard.Void)
		s.fail(w, rec, problem("upstream_unavailable", "the authenticator did not answer; retry later"))
		return true
	}
	return false
}

// loginAnswer writes a successful login's answer: the authenticator's
// result and the account's device token (issued at the store time at).
func (s *Server) loginAnswer(ctx context.Context, w http.ResponseWriter, rec *record, account, presented string, res authn.LoginResult, at time.Time) {
	device := func() string {
		return s.deviceToken(ctx, w, account, presented, at)
	}
	switch {
	case res.Passthrough != nil:
		rec.outcome = "authenticated"
		pt := res.Passthrough
		if pt.Status >= 200 && pt.Status < 300 {
			// the body is the app's: the token goes in a header too
			w.Header().Set(deviceHeader, device())
		}
		for _, c := range pt.Cookies {
			w.Header().Add("Set-Cookie", c)
		}
		if pt.ContentType != "" {
			w.Header().Set("Content-Type", pt.ContentType)
		}
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(pt.Status)
		_, _ = w.Write(pt.Body)
	case res.Challenge != nil:
		rec.outcome = "challenge"
		writeJSON(w, http.StatusOK, map[string]string{"status": "challenge", "challengeName": res.Challenge.Name, "session": res.Challenge.Session})
	case res.Token && s.Tokens == nil:
		s.fail(w, rec, problem("not_ready", "this deployment signs no tokens here"))
	case res.Token:
		if at.IsZero() {
			at = time.Now() // no rule asked the store: nothing else tells the time
		}
		tok, err := s.Tokens.Sign(at, account, "login", "", token.Password)
		if err != nil {
			s.Log.ErrorContext(ctx, "sign token", "err", err)
			s.fail(w, rec, problem("internal_error", "the token could not be signed"))
			return
		}
		rec.outcome = "authenticated"
		writeJSON(w, http.StatusOK, loginResponse{Status: "authenticated", Token: tok, DeviceToken: device()})
	default:
		rec.outcome = "authenticated"
		out := map[string]any{"status": "authenticated"}
		for k, v := range res.Fields {
			out[k] = v
		}
		if tok := device(); tok != "" {
			out["deviceToken"] = tok
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// handleSignup fronts the authenticator's signup. The answer is the same
// 202 whether or not the address is registered: an existing account is
// neither changed nor told apart.
func (s *Server) handleSignup(w http.ResponseWriter, r *http.Request) {
	rec := newRecord("signup")
	defer s.logDecision(r.Context(), rec)
	var in struct {
		Email, Password, CaptchaToken string
		Attributes                    map[string]string
	}
	body, p := s.body(w, r, fields{"email": &in.Email, "password": &in.Password, "attributes": &in.Attributes, "captchaToken": &in.CaptchaToken})
	if p != nil {
		s.fail(w, rec, p)
		return
	}
	errs := map[string]string{}
	dest, err := identity.ParseEmail(in.Email)
	if err != nil {
		errs["email"] = reason(err)
	}
	if err := password.Check(in.Password); err != nil {
		errs["password"] = err.Error()
	}
	s.checkAttributes(in.Attributes, errs)
	if s.Auth == nil {
		s.fail(w, rec, problem("upstream_unavailable", "this deployment fronts no authenticator"))
		return
	}
	req := guard.Request{Action: "signup", Subject: guard.Subject{Destination: dest}, Attributes: map[string]string{"channel": "email"}}
	req, p = s.admit(r, rec, req, "destination", dest.Key, errs)
	if p != nil {
		s.fail(w, rec, p)
		return
	}
	ctx := r.Context()
	if rec.decision.Challenged {
		if answer := s.challengeCaptcha(ctx, rec, req, in.CaptchaToken); answer != nil {
			answer(w)
			return
		}
	}
	err = s.Auth.SignUp(ctx, authn.SignUp{
		Email: dest.Address, Password: in.Password, Attributes: in.Attributes, Body: body,
		ClientIP: req.Subject.IP, UserAgent: r.UserAgent(),
	})
	if s.signUpFailed(ctx, w, rec, req, err) {
		return
	}
	rec.outcome = "pending"
	if _, ok := s.Auth.(Confirmer); ok {
		// Every signup, for a new address or not, sends a code: the
		// mailbox's owner confirms by approving it (a registered address
		// is told apart neither by the answer nor by its time).
		if full := s.sendSignupCode(ctx, dest); full {
			// (answered as every signup: the record says no code went)
			rec.outcome = "pending:delivery_unavailable"
		}
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "pending"})
}

// checkAttributes puts what is wrong with a signup's attributes in errs:
// a bad name, one signup does not accept, a value too long.
func (s *Server) checkAttributes(attributes map[string]string, errs map[string]string) {
	for k, v := range attributes {
		switch {
		case !validAttribute(k):
			errs["attributes."+k] = "attribute names are letters, digits, '_', '-' and ':', at most 64"
		case !slices.Contains(s.Config.Signup.Attributes, k):
			errs["attributes."+k] = "not accepted at signup (signup.attributes: " + strings.Join(s.Config.Signup.Attributes, ", ") + ")"
		case utf8.RuneCountInString(v) > 2048:
			errs["attributes."+k] = "must be at most 2048 characters"
		}
	}
}

// signUpFailed answers a signup the authenticator refused or did not
// answer (err not nil), with nothing counted; false: it succeeded.
func (s *Server) signUpFailed(ctx context.Context, w http.ResponseWriter, rec *record, req guard.Request, err error) bool {
	switch {
	case errors.Is(err, authn.ErrRejected):
		// Refused for what the authenticator says of it (its password
		// policy): no account was made, nothing counts.
		s.settle(ctx, req, rec.decision, guard.Void)
		s.fail(w, rec, invalidRequest(map[string]string{"body": "the authenticator refuses this signup: " + rejection(err)}))
		return true
	case err != nil:
		s.Log.ErrorContext(ctx, "sign up", "err", err)
		s.settle(ctx, req, rec.decision, guard.Void)
		s.fail(w, rec, problem("upstream_unavailable", "the authenticator did not answer; retry later"))
		return true
	}
	return false
}

// sendSignupCode sends the code that confirms a local account. A failure
// is logged: the user can ask for a new code (/v1/otp/send, purpose
// signup); full: the queue had no room for it (logged by the queue,
// paced), and the code the address had stays.
func (s *Server) sendSignupCode(ctx context.Context, dest guard.Destination) (full bool) {
	if s.Sender == nil {
		s.Log.ErrorContext(ctx, "signup code: this deployment sends no messages")
		return false
	}
	release, err := s.room(ctx, dest.Channel)
	if err != nil {
		// the code sent before stays (a full queue's refusal: the queue
		// logs the fullness, paced)
		if _, full := queueFull(err); full {
			return true
		}
		s.Log.ErrorContext(ctx, "signup code", "err", err)
		return false
	}
	defer release() // the queue's place, when nothing was queued
	issued, err := s.Codes.Issue(ctx, dest, "signup", "")
	var msg message.Message
	if err == nil {
		msg, err = s.message(dest, "signup", "", issued.Code)
		numbered(&msg, dest, "signup", issued)
	}
	if err == nil {
		err = s.Sender.Send(WithRoomChecked(ctx, release), msg) // room was asked for above
	}
	if err != nil {
		s.Log.ErrorContext(ctx, "signup code", "err", err)
		return false
	}
	s.delivered(ctx, dest)
	return false
}

// rejection is what an authenticator says of a rejected signup (it wraps
// authn.ErrRejected first: "%w: what").
func rejection(err error) string {
	return strings.TrimPrefix(err.Error(), authn.ErrRejected.Error()+": ")
}

func validAttribute(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':') {
			return false
		}
	}
	return true
}

// body decodes like decode and also returns the raw body, for an
// authenticator that forwards it.
func (s *Server) body(w http.ResponseWriter, r *http.Request, f fields) ([]byte, *Problem) {
	if p := checkMediaType(r); p != nil {
		return nil, p
	}
	raw, p := readBody(w, r)
	if p != nil {
		return nil, p
	}
	return raw, decodeBytes(raw, f)
}
