// Package message is the contract between the HTTP API and the senders
// that deliver its codes (SES, SNS, the delivery queue, the local
// outbox): the [Message] a sender receives, the [Sender] it implements
// and the errors it wraps. A sender imports this package, not the
// engine.
package message

import (
	"context"
	"errors"
	"time"
)

// Channel is how a code reaches its destination.
type Channel string

// The channels.
const (
	Email Channel = "email"
	SMS   Channel = "sms"
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
	// Version is the code's number among its slot's (otp.Store.Put's), or
	// 0: a queue makes the message the newest of its slot only over one
	// of a lower number, so of two sends at once the message delivered is
	// the one whose code is kept. Not part of a queued job.
	Version int64 `json:"-"`
	// CodeKey is the code store's key of Code, when Version is its
	// number (otp.Issued.Key): the store keeps the newest code's number
	// beside it (redisstore.Codes: at CodeKey + "v", and the code's digest
	// in the hash's field h while it can be verified), so a queue within
	// the process asks the store whether the message is still its slot's
	// newest, and its code alive, instead of keeping a ledger entry of its
	// own. Not part of a queued job.
	CodeKey string `json:"-"`
	// TTL is the code's lifetime: a queued message not delivered within
	// it is dropped. Zero: the queue's default.
	TTL time.Duration
	// Receipt is the send's void receipt (the guard's VoidReceipt), or
	// empty: a queued message given up on settles it void, so a provider
	// outage spends nobody's budget.
	Receipt string
}

// Sender delivers a rendered message. It wraps ErrUndeliverable or
// ErrUnavailable so the API can answer clearly, and never puts the code
// in an error.
type Sender interface {
	Send(ctx context.Context, m Message) error
}

// Delivery errors a sender wraps, so the API can answer each clearly.
var (
	// ErrUndeliverable: the provider refuses this destination (opted out,
	// suppressed, not a reachable number). Retrying will not help.
	ErrUndeliverable = errors.New("the provider refuses this destination")
	// ErrUnavailable: the provider failed or throttled; a later retry may
	// succeed.
	ErrUnavailable = errors.New("the message provider is unavailable")
)
