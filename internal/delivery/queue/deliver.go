package queue

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
)

// SealLabel names the key the jobs are sealed with (guard.DeriveKey,
// Guard.Derive).
const SealLabel = "delivery-queue seal"

// Outcome is what one delivery attempt did with a message.
type Outcome string

// The outcomes. Every one but Retry and Dead is final: the message
// leaves the queue.
const (
	Delivered     Outcome = "delivered"
	Undeliverable Outcome = "undeliverable" // the provider refuses the destination: dropped, the send stays counted
	Superseded    Outcome = "superseded"    // a newer message for its destination and purpose was queued
	Expired       Outcome = "expired"       // its code ended before its turn
	Duplicate     Outcome = "duplicate"     // a redelivery of a message already sent
	Malformed     Outcome = "malformed"     // does not open with this deployment's key
	Retry         Outcome = "retry"         // not sent yet: again after the wait returned
	Dead          Outcome = "dead"          // failed on its last receive (the send's units went back, once): for the dead-letter queue
)

// Deliverer sends queued messages through the direct sender (paced to
// the provider's rate, bounded by its timeout).
type Deliverer struct {
	send        func(ctx context.Context, m guard.Message) error
	void        func(ctx context.Context, receipt string) error
	ledger      *Ledger
	aead        cipher.AEAD
	maxReceives int
	lease       time.Duration
	log         *slog.Logger
}

// DeliverOptions are a Deliverer's parts.
type DeliverOptions struct {
	Redis redis.UniversalClient
	// SealKey is guard.DeriveKey(secret, SealLabel).
	SealKey []byte
	// Sender is the direct sender, or a function returning the one in
	// force.
	Sender func() api.Sender
	// Void settles a send's receipt void (its units go back).
	Void func(ctx context.Context, receipt string) error
	// MaxReceives: on this receive a message still failing is Dead.
	// Default 5 (the stack's redrive policy).
	MaxReceives int
	// Lease bounds a claim: a consumer that dies while sending holds the
	// message this long. Default 60s.
	Lease time.Duration
	Log   *slog.Logger
}

// NewDeliverer returns the Deliverer of o.
func NewDeliverer(o DeliverOptions) (*Deliverer, error) {
	if o.Redis == nil || len(o.SealKey) == 0 || o.Sender == nil || o.Void == nil {
		return nil, errors.New("queue: a deliverer needs Redis, the seal key, a sender and the void settlement")
	}
	block, err := aes.NewCipher(o.SealKey)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if o.MaxReceives <= 0 {
		o.MaxReceives = 5
	}
	if o.Lease <= 0 {
		o.Lease = time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	sender := o.Sender
	return &Deliverer{
		send: func(ctx context.Context, m guard.Message) error { return sender().Send(ctx, m) }, void: o.Void,
		ledger: NewLedger(o.Redis), aead: aead, maxReceives: o.MaxReceives, lease: o.Lease, log: o.Log,
	}, nil
}

// Deliver attempts the sealed job body on its receive-th receive (the
// first is 1). For Retry it returns how long the message should wait.
func (d *Deliverer) Deliver(ctx context.Context, body string, receive int) (Outcome, time.Duration) {
	job, err := Open(d.aead, body)
	if err != nil {
		d.log.ErrorContext(ctx, "a queued message is dropped", "err", err)
		return Malformed, 0
	}
	claim, token, err := d.ledger.Claim(ctx, job.Key, job.ID, job.Expires, d.lease)
	if err != nil {
		d.log.WarnContext(ctx, "the queue's ledger does not answer", "err", err)
		return d.failed(ctx, job, receive)
	}
	switch claim {
	case ClaimDuplicate:
		return Duplicate, 0
	case ClaimExpired:
		return Expired, 0
	case ClaimSuperseded:
		return Superseded, 0
	case ClaimDead:
		return Dead, 0
	case ClaimBusy:
		return Retry, d.lease
	}
	err = d.send(ctx, job.Message)
	if err == nil || errors.Is(err, guard.ErrUndeliverable) {
		if derr := d.ledger.Done(context.WithoutCancel(ctx), job.Key, job.ID); derr != nil {
			d.log.WarnContext(ctx, "a sent message was not marked sent; a redelivery within its lease finds it busy", "err", derr)
		}
		if err != nil {
			d.log.WarnContext(ctx, "the provider refuses a queued message's destination", "channel", job.Message.Channel, "err", err)
			return Undeliverable, 0
		}
		return Delivered, 0
	}
	d.log.WarnContext(ctx, "a queued message was not sent", "channel", job.Message.Channel, "receive", receive, "err", err)
	if rerr := d.ledger.Release(context.WithoutCancel(ctx), job.Key, job.ID, token); rerr != nil {
		d.log.WarnContext(ctx, "a failed send's claim was not released; it lapses by itself", "err", rerr)
	}
	return d.failed(ctx, job, receive)
}

// failed is the outcome of a message not sent: a retry after a backoff,
// or on the last receive Dead, with the send's units given back.
func (d *Deliverer) failed(ctx context.Context, job Job, receive int) (Outcome, time.Duration) {
	if receive < d.maxReceives {
		return Retry, Backoff(receive)
	}
	ctx = context.WithoutCancel(ctx)
	if err := d.ledger.Kill(ctx, job.Key, job.ID); err != nil {
		// unmarked, a later receive could give the units back twice
		d.log.ErrorContext(ctx, "a dead message was not marked; its send is not given back", "err", err)
		return Dead, 0
	}
	if err := d.void(ctx, job.Message.Receipt); err != nil {
		d.log.ErrorContext(ctx, "a dead message's send was not given back", "err", err)
	}
	return Dead, 0
}

// Backoff is the wait after the receive-th failed attempt: 2s, 4s, 8s,
// ... at most a minute.
func Backoff(receive int) time.Duration {
	if receive < 1 {
		receive = 1
	}
	if receive > 6 {
		return time.Minute
	}
	return min(time.Minute, 2*time.Second<<(receive-1))
}
