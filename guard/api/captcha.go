package api

// The CAPTCHA challenge of the requests that have no second factor (a
// send, a signup).

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"time"

	"github.com/otpguard/otpguard/guard"
)

// captchaProblem is the 403 that asks for a solved CAPTCHA.
type captchaProblem struct {
	*Problem
	Challenge string `json:"challenge"`
	Provider  string `json:"provider"`
	SiteKey   string `json:"siteKey"`
}

// challengeCaptcha decides a request a challenge rule flagged that has no
// second factor (a send, a signup): nil when token is a CAPTCHA its
// provider accepts (once: a token is spent), after which what the
// challenge held back is committed (rec.decision becomes the proven
// decision); else the answer to write. A provider that cannot answer is
// treated as the rule's onStoreError says, and its token is not spent
// (the user may send it again); a client that hung up stops here.
func (s *Server) challengeCaptcha(ctx context.Context, rec *record, req guard.Request, token string) func(http.ResponseWriter) {
	ask := func(detail string) func(http.ResponseWriter) { return s.askCaptcha(rec, detail) }
	answer := func(outcome string, p *Problem) func(http.ResponseWriter) { return answerProblem(rec, outcome, p) }
	if s.Captcha == nil || token == "" {
		return ask("solve the CAPTCHA and send its token as captchaToken")
	}
	spent := ""
	if s.Blobs != nil {
		m := hmac.New(sha256.New, s.Guard.Derive("captcha tokens"))
		m.Write([]byte(token))
		spent = "og:{" + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16]) + "}:cap"
		first, err := s.Blobs.Once(ctx, spent, 10*time.Minute)
		switch {
		case err != nil:
			// without the mark a token could be replayed: no proof now
			s.Log.ErrorContext(ctx, "spend the captcha token", "err", err)
			return answer("challenge_failed:store", storeUnavailable())
		case !first:
			rec.outcome = "challenge_failed:replayed"
			return ask("this CAPTCHA token was already used; solve a new one")
		}
	}
	err := s.Captcha.Verify(ctx, token, req.Subject.IP)
	if err != nil && !errors.Is(err, ErrCaptchaRejected) && spent != "" {
		// the provider did not judge the token: it is not spent
		if _, derr := s.Blobs.Delete(context.WithoutCancel(ctx), spent); derr != nil {
			s.Log.WarnContext(ctx, "unspend the captcha token", "err", derr)
		}
	}
	switch {
	case err == nil:
		s.proved(ctx, rec.action, rec.decision.ChallengedBy, true)
		d, err := s.Guard.Prove(context.WithoutCancel(ctx), req, rec.decision)
		if err != nil {
			s.Log.ErrorContext(ctx, "commit the proven attempt", "err", err)
			return answer("challenge_failed:store", storeUnavailable())
		}
		rec.decision = d
		return nil
	case errors.Is(err, ErrCaptchaRejected):
		rec.outcome = "challenge_failed:captcha"
		s.proved(ctx, rec.action, rec.decision.ChallengedBy, false)
		return ask("the CAPTCHA was not solved; solve a new one")
	case ctx.Err() != nil:
		// the client hung up: not a provider failure, and nothing goes on
		return answer("cancelled", problem("cancelled", "the client closed the request"))
	}
	s.Log.WarnContext(ctx, "captcha provider", "err", err)
	if s.ruleOnStoreError(rec.decision.ChallengedBy) == "allow" {
		return nil
	}
	return answer("challenge_failed:unavailable", problem("captcha_unavailable", "the CAPTCHA provider does not answer; retry later"))
}

func (s *Server) ruleOnStoreError(name string) string {
	for _, r := range s.Config.Rules {
		if r.Name == name {
			return r.OnStoreError
		}
	}
	return "deny"
}

// askCaptcha is the answer that asks for a CAPTCHA (detail says why),
// naming the provider and its site key.
func (s *Server) askCaptcha(rec *record, detail string) func(http.ResponseWriter) {
	p := problem("challenge_required", detail)
	cp := captchaProblem{Problem: p, Challenge: "captcha"}
	if s.Captcha != nil {
		cp.Provider, cp.SiteKey = s.Captcha.Provider(), s.Captcha.SiteKey()
	}
	return func(w http.ResponseWriter) {
		if rec.outcome == "" {
			rec.outcome = "challenged"
		}
		w.Header().Set("Cache-Control", "no-store")
		writeProblemBody(w, p.Status, cp)
	}
}

// answerProblem records outcome and is the answer that writes p.
func answerProblem(rec *record, outcome string, p *Problem) func(http.ResponseWriter) {
	rec.outcome = outcome
	return func(w http.ResponseWriter) { p.write(w) }
}
