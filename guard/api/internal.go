package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/guard/identity"
)

// The internal routes, for an app's backend that keeps its own login or
// OTP flow: it asks for a decision before the attempt and reports the
// outcome after, and an administrator reads and clears a subject's state.

// subjectIn is the subject member of the internal routes' bodies.
type subjectIn struct{ Account, IP, Email, Phone, Device string }

func (in *subjectIn) fields() fields {
	return fields{"account": &in.Account, "ip": &in.IP, "email": &in.Email, "phone": &in.Phone, "device": &in.Device}
}

// request normalizes a subject exactly as the public routes do.
func (s *Server) request(action string, in subjectIn, attrs map[string]string, errs map[string]string) guard.Request {
	req := guard.Request{Action: action, Attributes: map[string]string{}}
	if !slices.Contains(s.Guard.Actions(), action) {
		errs["action"] = "no rule has this action; the configured actions are " + strings.Join(s.Guard.Actions(), ", ")
	}
	if in.Account != "" {
		a, err := identity.ParseAccount(in.Account)
		if err != nil {
			errs["subject.account"] = reason(err)
		}
		req.Subject.Account = a
	}
	switch {
	case len(in.Device) > maxDeviceToken:
		errs["subject.device"] = "is not a device token"
	case in.Device != "" && in.Account == "":
		errs["subject.device"] = "a device token is bound to an account: give subject.account too"
	}
	req.Device = in.Device
	if in.IP != "" {
		ip, err := identity.ParseIP(in.IP)
		if err != nil {
			errs["subject.ip"] = reason(err)
		}
		req.Subject.IP = ip
	}
	switch {
	case in.Email != "" && in.Phone != "":
		errs["subject"] = "give email or phone, not both"
	case in.Email != "":
		d, err := identity.ParseEmail(in.Email)
		if err != nil {
			errs["subject.email"] = reason(err)
		}
		req.Subject.Destination, req.Attributes["channel"] = d, "email"
	case in.Phone != "":
		d, err := identity.ParsePhone(in.Phone, s.policy)
		if err != nil {
			errs["subject.phone"] = reason(err)
		}
		req.Subject.Destination, req.Attributes["channel"] = d, "sms"
	}
	for k, v := range attrs {
		switch k {
		case "purpose":
			req.Attributes[k] = v
		case "channel":
			if v != req.Attributes[k] {
				errs["attributes.channel"] = "follows from the subject: email or phone"
			}
		default:
			errs["attributes."+k] = "unknown attribute; rules filter on purpose (and channel, from the subject)"
		}
	}
	return req
}

// decisionResponse is the 200 of POST /v1/decisions.
type decisionResponse struct {
	Allowed    bool        `json:"allowed"`
	DeniedBy   string      `json:"deniedBy"`
	RetryAfter int         `json:"retryAfter"`
	Rules      []ruleState `json:"rules"`
	// Lease names the concurrency leases taken; release them with
	// {"action","subject","release":lease}.
	Lease string `json:"lease,omitempty"`
	// Device is the request's device attribute (trusted or untrusted)
	// when a rule asked for it.
	Device string `json:"device,omitempty"`
	// Challenge is, for an allowed request a rule in mode challenge
	// flagged, the proof to ask for: otp (a step-up code, for a login
	// whose password is right) or captcha.
	Challenge string `json:"challenge,omitempty"`
	// ChallengedBy names that rule.
	ChallengedBy string `json:"challengedBy,omitempty"`
}

type ruleState struct {
	Name       string `json:"name"`
	Allowed    bool   `json:"allowed"`
	Remaining  int64  `json:"remaining"`
	ResetAfter int    `json:"resetAfter"`
	Skipped    bool   `json:"skipped,omitempty"`
}

// handleDecision is POST /v1/decisions: a decision for a backend that
// cannot be fronted. A denial is still a 200 with "allowed": false (the
// caller decides). The RateLimit-Policy and RateLimit headers describe
// the rule closest to its limit.
func (s *Server) handleDecision(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Action, Release string
		Subject         subjectIn
		Attributes      map[string]string
	}
	if p := decode(w, r, fields{"action": &in.Action, "subject": in.Subject.fields(), "attributes": &in.Attributes, "release": &in.Release}); p != nil {
		p.write(w)
		return
	}
	errs := map[string]string{}
	req := s.request(in.Action, in.Subject, in.Attributes, errs)
	if len(errs) > 0 {
		invalidRequest(errs).write(w)
		return
	}
	ctx := r.Context()
	if in.Release != "" {
		if err := s.Guard.Release(ctx, req, in.Release); err != nil {
			s.internalError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"allowed": true, "released": true})
		return
	}
	rec := newRecord(req.Action)
	defer s.logDecision(ctx, rec)
	s.recordSubject(rec, req)
	d, err := s.Guard.Allow(ctx, req)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	rec.decision = d
	rec.outcome = "allowed"
	if !d.Allowed {
		rec.outcome = "denied"
	}
	out := decisionResponse{Allowed: d.Allowed, DeniedBy: d.DeniedBy, RetryAfter: seconds(d.RetryAfter), Rules: []ruleState{}, Device: d.Device}
	if d.Allowed {
		out.Lease = d.Lease // a denied request holds no lease
	}
	if d.Challenged {
		out.Challenge, out.ChallengedBy, rec.outcome = "captcha", d.ChallengedBy, "challenged"
		if req.Action == "login" {
			out.Challenge = "otp"
		}
	}
	out.Rules = ruleStates(w, d)
	writeJSON(w, http.StatusOK, out)
}

// recordSubject puts the fingerprints of req's subject (its account, else
// its destination) and of its IP in the decision record.
func (s *Server) recordSubject(rec *record, req guard.Request) {
	switch {
	case req.Subject.Account != "":
		rec.subject = s.Guard.Fingerprint("account", req.Subject.Account)
	case !req.Subject.Destination.IsZero():
		rec.subject = s.Guard.Fingerprint("destination", req.Subject.Destination.Key)
	}
	if req.Subject.IP.IsValid() {
		rec.ip = s.Guard.Fingerprint("ip", req.Subject.IP.String())
	}
}

// ruleStates is the state of each of d's rules, and sets the RateLimit
// headers of the rule closest to denying.
func ruleStates(w http.ResponseWriter, d guard.Decision) []ruleState {
	rules := []ruleState{}
	closest := -1
	for i, res := range d.Rules {
		rules = append(rules, ruleState{res.Rule, res.Allowed, res.Remaining, seconds(res.ResetAfter), res.Skipped})
		// the rule closest to denying: a challenge or shadow rule never
		// denies (its remaining would tell a client it is out for a window)
		if !res.Skipped && res.Mode != guard.ModeChallenge && res.Mode != guard.ModeShadow &&
			(closest < 0 || res.Remaining < d.Rules[closest].Remaining) {
			closest = i
		}
	}
	if closest >= 0 {
		res := d.Rules[closest]
		name := strconv.Quote(res.Rule)
		w.Header().Set("RateLimit-Policy", fmt.Sprintf("%s;q=%d;w=%d", name, res.Limit, seconds(res.Window)))
		w.Header().Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", name, res.Remaining, seconds(res.ResetAfter)))
	}
	return rules
}

// handleOutcome is POST /v1/outcomes: how an attempt a decision admitted
// ended, for the failure-counting rules → 204; with "issueDevice": true
// on a success for an account, 200 and the account's device token
// ({"deviceToken"}: the backend sets it on its client).
func (s *Server) handleOutcome(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Action, Outcome string
		Subject         subjectIn
		Attributes      map[string]string
		IssueDevice     bool
	}
	if p := decode(w, r, fields{"action": &in.Action, "subject": in.Subject.fields(), "attributes": &in.Attributes, "outcome": &in.Outcome, "issueDevice": &in.IssueDevice}); p != nil {
		p.write(w)
		return
	}
	errs := map[string]string{}
	req := s.request(in.Action, in.Subject, in.Attributes, errs)
	outcome := map[string]guard.Outcome{"failure": guard.Failure, "success": guard.Success}[in.Outcome]
	if outcome == 0 {
		errs["outcome"] = "must be failure or success"
	}
	if in.IssueDevice && (outcome != guard.Success || req.Subject.Account == "") {
		errs["issueDevice"] = "a device token is issued for a success of an account (subject.account)"
	}
	if len(errs) > 0 {
		invalidRequest(errs).write(w)
		return
	}
	res, err := s.Guard.Settle(context.WithoutCancel(r.Context()), req, guard.Decision{}, outcome)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if outcome == guard.Failure {
		s.lockoutEvents(r.Context(), req, guard.Decision{}, res)
	}
	w.Header().Set("Cache-Control", "no-store")
	if in.IssueDevice {
		tok, err := s.Guard.DeviceToken(req.Subject.Account, req.Device, time.Time{})
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"deviceToken": tok})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type blockState struct {
	Name       string `json:"name"`
	Remaining  int64  `json:"remaining"`
	ResetAfter int    `json:"resetAfter"`
	Locked     bool   `json:"locked"`
	LockedFor  int    `json:"lockedFor"`
}

// handleBlockStatus is GET /v1/blocks/{dimension}/{value}: the state of
// every rule keyed on that dimension alone, for that value.
func (s *Server) handleBlockStatus(w http.ResponseWriter, r *http.Request) {
	dim, subject, p := s.blockSubject(r)
	if p != nil {
		p.write(w)
		return
	}
	st, err := s.Guard.Status(r.Context(), dim, subject)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	out := []blockState{}
	for _, x := range st {
		out = append(out, blockState{x.Rule, x.Remaining, seconds(x.ResetAfter), x.Locked, seconds(x.LockedFor)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"rules": out})
}

// handleUnblock is DELETE /v1/blocks/{dimension}/{value}: an
// administrator's unlock → 204.
func (s *Server) handleUnblock(w http.ResponseWriter, r *http.Request) {
	dim, subject, p := s.blockSubject(r)
	if p != nil {
		p.write(w)
		return
	}
	names, err := s.Guard.Unblock(r.Context(), dim, subject)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	fp := s.Guard.Fingerprint(dim, s.Guard.Value(dim, subject))
	s.Log.InfoContext(r.Context(), "unblock", "dimension", dim, "subject", fp, "rules", strings.Join(names, " "))
	caller := ""
	if s.Caller != nil {
		caller = s.Caller(r)
	}
	s.publish(r.Context(), events.Event{DetailType: events.AdminUnblock, Detail: map[string]any{
		"dimension": dim, "subject": fp, "rules": append([]string{}, names...), "caller": caller,
	}}, "", 0)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// blockSubject reads {dimension}/{value}; the dimensions with a slash
// (ip/56, ip/48, ip/24, ip/16) are written ip%2F56 or ip56; asn takes
// AS13335 or 13335.
func (s *Server) blockSubject(r *http.Request) (string, guard.Subject, *Problem) {
	dim := r.PathValue("dimension")
	switch dim {
	case "ip56", "ip48", "ip24", "ip16":
		dim = "ip/" + dim[2:]
	}
	subject, err := identity.ParseDimension(dim, r.PathValue("value"), s.policy)
	if err != nil {
		return "", subject, invalidRequest(map[string]string{"value": reason(err)})
	}
	return dim, subject, nil
}

func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, guard.ErrInvalidInput) {
		invalidRequest(map[string]string{"subject": reason(err)}).write(w)
		return
	}
	// The route's pattern, never its path: /v1/blocks/{dimension}/{value}
	// and /v1/devices/{account} hold an email, phone, IP or account.
	s.Log.ErrorContext(r.Context(), "internal route", "route", r.Pattern, "err", err)
	storeUnavailable().write(w)
}

// seconds rounds a duration up to whole seconds.
func seconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }
