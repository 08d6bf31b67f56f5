package api

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/proof"
)

// Challenges (docs/contract.md §6). A rule in mode challenge that would deny
// asks for a proof instead: a login whose password is right gets a
// step-up code at the account's verified address and its result is held
// until the code comes back (POST /v1/login/challenge); a send or a signup
// gets 403 challenge_required and repeats itself with a solved CAPTCHA.

// Blobs keeps the held logins and the spent CAPTCHA tokens
// (redisstore.Blobs).
type Blobs interface {
	Put(ctx context.Context, key string, value []byte, ttl time.Duration) error
	Get(ctx context.Context, key string) ([]byte, bool, error)
	Delete(ctx context.Context, key string) (bool, error)
	Once(ctx context.Context, key string, ttl time.Duration) (bool, error)
}

// Captcha verifies a solved CAPTCHA's token with its provider (see
// package proof).
type Captcha = proof.Captcha

// ErrCaptchaRejected: the provider refused the token.
var ErrCaptchaRejected = proof.ErrCaptchaRejected

// heldLogin is a challenged login waiting for its code, sealed in Redis.
type heldLogin struct {
	Rule      string            `json:"u"` // the challenge rule
	Account   string            `json:"a"`
	To        string            `json:"t"`
	Channel   string            `json:"c"`
	Receipt   string            `json:"r"`
	Presented string            `json:"p,omitempty"`
	Result    authn.LoginResult `json:"x"`
}

// sessionLen is a session id's length: 128 random bits, base64url.
const sessionLen = 22

// sessionKey is the Redis key and the AEAD's associated data of a session
// (a keyed hash of it: the id itself is never stored), and the purpose its
// code is issued under (so a code opens its own session only).
func (s *Server) sessionKey(session string) (key, purpose string) {
	m := hmac.New(sha256.New, s.Guard.Derive("step-up session ids"))
	m.Write([]byte(session))
	tag := base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
	return "og:{" + tag + "}:ch", "stepup." + tag
}

func (s *Server) aead() (cipher.AEAD, error) {
	b, err := aes.NewCipher(s.Guard.Derive("step-up sessions aes-256-gcm"))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// seal encrypts h (AES-256-GCM, a random nonce, the key as associated
// data): Redis holds nothing of the result, the account or the address in
// clear.
func (s *Server) seal(h heldLogin, key string) ([]byte, error) {
	plain, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	a, err := s.aead()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(plain)+a.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return a.Seal(nonce, nonce, plain, []byte(key)), nil
}

func (s *Server) open(blob []byte, key string) (heldLogin, error) {
	var h heldLogin
	a, err := s.aead()
	if err != nil {
		return h, err
	}
	if len(blob) < a.NonceSize() {
		return h, errors.New("short")
	}
	plain, err := a.Open(nil, blob[:a.NonceSize()], blob[a.NonceSize():], []byte(key))
	if err != nil {
		return h, err
	}
	return h, json.Unmarshal(plain, &h)
}

// verifiedDestination is where a step-up code for res can go: the
// verified email, else the verified phone.
func (s *Server) verifiedDestination(res authn.LoginResult) (guard.Destination, bool) {
	if res.VerifiedEmail != "" {
		if d, err := identity.ParseEmail(res.VerifiedEmail); err == nil {
			return d, true
		}
	}
	if res.VerifiedPhone != "" {
		if d, err := identity.ParsePhone(res.VerifiedPhone, s.policy); err == nil {
			return d, true
		}
	}
	return guard.Destination{}, false
}

// challengeResponse is the 200 of a challenged login.
type challengeResponse struct {
	Status        string `json:"status"`
	ChallengeName string `json:"challengeName"`
	Session       string `json:"session"`
	To            string `json:"to"`
}

// stepUp answers a login that a challenge rule flagged and whose password
// was right: a code to the account's verified address and the result
// held, or the rule's fallback when there is no such address (or no way
// to send).
func (s *Server) stepUp(ctx context.Context, w http.ResponseWriter, rec *record, req guard.Request, account, presented string, res authn.LoginResult) {
	d := rec.decision
	dest, ok := s.verifiedDestination(res)
	if !ok || s.Sender == nil || s.Blobs == nil {
		if d.Fallback == "allow" {
			s.settle(ctx, req, d, guard.Success)
			s.loginAnswer(ctx, w, rec, account, presented, res, d.At)
			return
		}
		s.settle(ctx, req, d, guard.Failure)
		rec.outcome = "challenge_failed:no_address"
		s.fail(w, rec, rateLimited(d.ChallengedBy, s.challengeRetry(d)))
		return
	}
	// What follows outlives a client that hangs up: the attempt is held
	// and the owner gets the code whether or not the client waits for
	// its session (a hang-up once the password was checked must not be a
	// free, silent probe).
	ctx = context.WithoutCancel(ctx)
	// Step-up codes go only where a right password was given, and at
	// most as often as the login.stepup rules say (a holder of the
	// password must not fill the owner's mailbox).
	if slices.Contains(s.Guard.Actions(), "login.stepup") {
		sreq := guard.Request{Action: "login.stepup", Subject: guard.Subject{Account: account, IP: req.Subject.IP}, Partial: true}
		if _, p := s.decide(ctx, sreq); p != nil {
			s.settle(ctx, req, d, guard.Held)
			s.fail(w, rec, p)
			return
		}
	}
	session, err := s.sendStepUp(ctx, dest, d, account, presented, res)
	if err != nil {
		s.Log.ErrorContext(ctx, "step-up code", "err", err)
		s.settle(ctx, req, d, guard.Void)
		s.fail(w, rec, problem("delivery_unavailable", "the step-up code could not be sent; retry later"))
		return
	}
	// until the code comes back, the attempt stays a failure of the
	// account's, counts as held, and what it would prove is not proven
	// (its receipt, sealed above, commits it with the code)
	s.settle(ctx, req, d, guard.Held)
	s.delivered(ctx, dest)
	rec.outcome = "challenged"
	name := "EMAIL_OTP"
	if dest.Channel == message.SMS {
		name = "SMS_OTP"
	}
	writeJSON(w, http.StatusOK, challengeResponse{Status: "challenge", ChallengeName: name, Session: session, To: mask(dest)})
}

// sendStepUp issues a step-up code to dest, holds the login under a new
// session (sealed with the held decision's receipt), and sends the code;
// it returns the session.
func (s *Server) sendStepUp(ctx context.Context, dest guard.Destination, d guard.Decision, account, presented string, res authn.LoginResult) (string, error) {
	session := newSession()
	key, purpose := s.sessionKey(session)
	issued, err := s.Codes.Issue(ctx, dest, purpose, "") // its message has no slot: it supersedes nothing
	var msg message.Message
	if err == nil {
		msg, err = s.message(dest, "login", "", issued.Code)
	}
	var blob []byte
	if err == nil {
		blob, err = s.seal(heldLogin{Rule: d.ChallengedBy, Account: account, To: dest.Address, Channel: string(dest.Channel),
			Receipt: s.Guard.HeldReceipt(d), Presented: presented, Result: res}, key)
	}
	if err == nil {
		err = s.Blobs.Put(ctx, key, blob, s.Codes.TTL())
	}
	if err == nil {
		err = s.Sender.Send(ctx, msg)
	}
	return session, err
}

// challengeRetry is the wait a challenge rule's fallback deny names.
func (s *Server) challengeRetry(d guard.Decision) time.Duration {
	for _, r := range d.Rules {
		if r.Rule == d.ChallengedBy {
			return r.RetryAfter
		}
	}
	return time.Minute
}

func newSession() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// handleLoginChallenge is POST /v1/login/challenge {"session","code"}:
// the held result of a challenged login, exactly as /v1/login would have
// answered, once. A wrong code, an expired, replayed or another
// account's session: 401 invalid_credentials, the failure counted on the
// code-guessing rules (otp.verify, for the account's address).
func (s *Server) handleLoginChallenge(w http.ResponseWriter, r *http.Request) {
	rec := newRecord("login.challenge")
	defer s.logDecision(r.Context(), rec)
	in, errs, ok := s.challengeAnswer(w, r, rec)
	if !ok {
		return
	}
	ctx := r.Context()
	held, key, purpose, dest, ok := s.heldChallenge(ctx, w, rec, in.Session)
	if !ok {
		return
	}
	// the code-guessing rules on the client's address apply; those on the
	// address the code went to do not: a stranger who guesses at another
	// code of that address (a signup's) must not keep the owner from
	// answering this one, and this code is guessed through its session
	// only (128 random bits: whoever holds one gave the right password),
	// burned after otp.maxAttempts wrong guesses
	vreq := otpRequest("otp.verify", dest, "login")
	vreq.Subject, vreq.Partial = guard.Subject{}, true
	req, p := s.admit(r, rec, vreq, "destination", dest.Key, errs)
	if p != nil {
		s.fail(w, rec, p)
		return
	}
	v, ok := s.checkChallengeCode(ctx, w, rec, req, dest, purpose, in.Code, held.Rule)
	if !ok {
		return
	}
	// The code is consumed: one caller got here; the session goes too
	// (a replay finds nothing).
	if deleted, err := s.Blobs.Delete(context.WithoutCancel(ctx), key); err != nil || !deleted {
		s.refuseChallenge(ctx, w, rec, held.Rule, "replayed")
		return
	}
	if err := s.Guard.SettleReceipt(context.WithoutCancel(ctx), held.Receipt, guard.Success); err != nil {
		s.Log.ErrorContext(ctx, "settle the challenged login", "err", err)
	}
	rec.outcome = "passed"
	s.proved(ctx, "login", held.Rule, true)
	s.loginAnswer(ctx, w, rec, held.Account, held.Presented, held.Result, v.At)
}

// challengeIn is a login challenge's answer: the session it names and
// the code.
type challengeIn struct{ Session, Code string }

// challengeAnswer decodes a login challenge's answer and checks its
// fields; false: the request was refused and the answer written. errs
// is for the checks admit adds.
func (s *Server) challengeAnswer(w http.ResponseWriter, r *http.Request, rec *record) (in challengeIn, errs map[string]string, ok bool) {
	if p := decode(w, r, fields{"session": &in.Session, "code": &in.Code}); p != nil {
		s.fail(w, rec, p)
		return in, nil, false
	}
	errs = map[string]string{}
	if in.Session == "" {
		errs["session"] = "required: the session of the challenge answer"
	}
	if n := s.Codes.Length(); len(in.Code) != n || !allDigits(in.Code) {
		errs["code"] = "must be " + strconv.Itoa(n) + " digits"
	}
	if len(errs) > 0 {
		s.fail(w, rec, invalidRequest(errs))
		return in, nil, false
	}
	return in, errs, true
}

// refuseChallenge answers a challenge that failed (why: its session or
// its code, or a replay) as the failed proof of rule, all alike.
func (s *Server) refuseChallenge(ctx context.Context, w http.ResponseWriter, rec *record, rule, why string) {
	rec.outcome = "failed:" + why
	s.proved(ctx, "login", rule, false)
	s.fail(w, rec, problem("invalid_credentials", "the code is wrong, or the challenge is over"))
}

// heldChallenge reads and opens the login held under session, and where
// its code went; false: it was refused (or could not be read) and the
// answer written.
func (s *Server) heldChallenge(ctx context.Context, w http.ResponseWriter, rec *record, session string) (held heldLogin, key, purpose string, dest guard.Destination, ok bool) {
	if s.Blobs == nil || len(session) != sessionLen {
		s.refuseChallenge(ctx, w, rec, held.Rule, "session")
		return held, key, purpose, dest, false
	}
	key, purpose = s.sessionKey(session)
	blob, found, err := s.Blobs.Get(ctx, key)
	if err != nil {
		s.Log.ErrorContext(ctx, "read the challenge", "err", err)
		s.fail(w, rec, storeUnavailable())
		return held, key, purpose, dest, false
	}
	if !found {
		s.refuseChallenge(ctx, w, rec, held.Rule, "session")
		return held, key, purpose, dest, false
	}
	held, err = s.open(blob, key)
	if err != nil {
		s.refuseChallenge(ctx, w, rec, held.Rule, "session")
		return held, key, purpose, dest, false
	}
	dest, err = identity.GuessDestination(held.To, s.policy)
	if err != nil {
		s.refuseChallenge(ctx, w, rec, held.Rule, "session")
		return held, key, purpose, dest, false
	}
	return held, key, purpose, dest, true
}

// checkChallengeCode checks the code against the one sent to dest and
// settles the attempt; false: it was wrong (or could not be checked) and
// the answer written.
func (s *Server) checkChallengeCode(ctx context.Context, w http.ResponseWriter, rec *record, req guard.Request, dest guard.Destination, purpose, code, rule string) (otp.Verdict, bool) {
	v, err := s.Codes.Verify(ctx, dest, purpose, code)
	if err != nil {
		s.Log.ErrorContext(ctx, "check code", "err", err)
		s.settle(ctx, req, rec.decision, guard.Void)
		s.fail(w, rec, storeUnavailable())
		return v, false
	}
	switch v.Check {
	case otp.Approved:
		s.settle(ctx, req, rec.decision, guard.Success)
	case otp.Missing:
		s.settle(ctx, req, rec.decision, guard.Stray)
		s.refuseChallenge(ctx, w, rec, rule, "code")
		return v, false
	default:
		s.settle(ctx, req, rec.decision, guard.Failure)
		s.refuseChallenge(ctx, w, rec, rule, "code")
		return v, false
	}
	return v, true
}
