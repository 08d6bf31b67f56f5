package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
)

// CognitoSend applies the otp.send rules to a message of a custom sender
// trigger and delivers it through the senders. A denial sends nothing and
// returns *Denied (the trigger logs it and returns normally: Cognito shows
// no error for these triggers). Other errors are the store's or the
// provider's.
func (s *Server) CognitoSend(ctx context.Context, m CognitoMessage) error {
	rec := newRecord("otp.send")
	defer s.logDecision(ctx, rec)
	purpose, known := CognitoPurpose(m.Source)
	if !known {
		rec.outcome = "invalid_request"
		return fmt.Errorf("api: unknown trigger source %q", m.Source)
	}
	if s.Sender == nil {
		rec.outcome = "delivery_unavailable"
		return errors.New("api: this function sends no messages")
	}
	dest, err := identity.ParseDestination(m.Channel, m.To, s.policy)
	if err != nil {
		// the number type or country checks refuse it, as /v1/otp/send
		rec.outcome = "invalid_request"
		return &Denied{Message: "This destination cannot receive messages.", Rule: "destination: " + reason(err)}
	}
	rec.subject = s.Guard.Fingerprint("destination", dest.Key)
	if m.IP.IsValid() {
		rec.ip = s.Guard.Fingerprint("ip", m.IP.String())
	}
	var receipt string
	var req guard.Request
	if purpose != "" {
		if req, receipt, err = s.cognitoDecide(ctx, rec, dest, purpose, m); err != nil {
			return err
		}
	}
	msg, err := s.cognitoMessage(dest, purpose, m)
	// Cognito keeps its codes: a newer Cognito message of the same kind
	// for the address supersedes this one, an otpguard send never does
	if purpose != "" {
		msg.Receipt = s.Guard.VoidReceipt(rec.decision)
		msg.Slot = "cognito\x00" + dest.Key + "\x00" + m.Source
	}
	if err == nil {
		err = s.Sender.Send(ctx, msg)
	}
	if err != nil {
		rec.outcome = "delivery_unavailable"
		if purpose != "" && !errors.Is(err, message.ErrUndeliverable) {
			s.settle(ctx, req, rec.decision, guard.Void)
		}
		return fmt.Errorf("api: send the %s message: %w", dest.Channel, err)
	}
	rec.outcome = "sent"
	s.delivered(ctx, dest)
	if receipt != "" && s.Blobs != nil {
		// PostConfirmation settles it as verified (the budgets that follow
		// verified traffic); Cognito's sign-up codes live 24 hours
		if err := s.keepReceipt(ctx, s.receiptKey(dest, purpose), receipt); err != nil {
			s.Log.WarnContext(ctx, "keep the receipt of a Cognito message", "err", err)
		}
	}
	return nil
}

// cognitoDecide applies the otp.send rules to a custom sender's message
// of purpose to dest, keyed also on its account and IP when it names
// them; a denial is *Denied. It returns the request and the send's
// receipt.
func (s *Server) cognitoDecide(ctx context.Context, rec *record, dest guard.Destination, purpose string, m CognitoMessage) (guard.Request, string, error) {
	var err error
	req := otpRequest("otp.send", dest, purpose)
	req.Subject.Account, req.Subject.IP, req.Partial = m.Account, m.IP, true
	if m.Account != "" {
		if req.Subject.Account, err = identity.ParseAccount(m.Account); err != nil {
			req.Subject.Account = ""
		}
	}
	d, p := s.decide(ctx, req)
	rec.decision = d
	if p != nil || !s.triggerAdmits(d) {
		rec.outcome = "rate_limited"
		if p != nil {
			rec.outcome = p.Code
		}
		return req, "", deniedFor(d, p)
	}
	return req, s.Guard.Receipt(d), nil
}
