package guard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"time"
)

// Message is one verification code on its way to a destination: what the
// HTTP API hands to a sender once the guard has allowed the send.
type Message struct {
	Channel Channel
	// To is the destination's Address (the email as typed with its domain
	// normalized, or the E.164 number).
	To      string
	Purpose string
	Locale  string
	// Code is the clear code. Only the local outbox writes it out; real
	// senders put it in the rendered bodies and nowhere else.
	Code string
	// Subject, Text and HTML are the rendered message (Subject and HTML
	// are empty for SMS).
	Subject, Text, HTML string
	// Slot names where the message's code lives (the code store and its
	// key): a newer queued message of the same slot supersedes an older
	// one, which is never delivered after it. Empty: the message
	// supersedes nothing (a step-up session's code, a notification).
	Slot string
	// TTL is the code's lifetime: a queued message not delivered within
	// it is dropped. Zero: the queue's default.
	TTL time.Duration
	// Receipt is the send's void receipt (Guard.VoidReceipt), or empty: a
	// queued message given up on settles it void, so a provider outage
	// spends nobody's budget.
	Receipt string
}

// Delivery errors a sender wraps, so the API can answer each clearly.
var (
	// ErrUndeliverable: the provider refuses this destination (opted out,
	// suppressed, not a reachable number). Retrying will not help.
	ErrUndeliverable = errors.New("the provider refuses this destination")
	// ErrDeliveryUnavailable: the provider failed or throttled; a later
	// retry may succeed.
	ErrDeliveryUnavailable = errors.New("the message provider is unavailable")
)

// Fingerprint names a subject in logs and metrics without revealing it:
// 72 bits of a keyed hash (the deployment secret) of the dimension and
// value, base64url: the same subject always has the same fingerprint, so
// its decisions can be followed through the logs.
func (g *Guard) Fingerprint(dimension, value string) string {
	if value == "" {
		return ""
	}
	m := hmac.New(sha256.New, g.secret)
	m.Write([]byte("log\x00" + dimension + "\x00" + value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:9])
}
