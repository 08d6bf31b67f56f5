package queue

import (
	"context"
	"crypto/cipher"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/message"
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
	send        func(ctx context.Context, m message.Message) error
	void        func(ctx context.Context, receipt string) error
	ledger      *Ledger
	aead        cipher.AEAD
	maxReceives int
	lease       time.Duration
	inProcess   bool
	log         *slog.Logger
}

// DeliverOptions are a Deliverer's parts.
type DeliverOptions struct {
	Redis redis.UniversalClient
	// Batch, if set, sends the ledger's commands (see Host.Batch).
	Batch Batch
	// SealKey is guard.DeriveKey(secret, SealLabel).
	SealKey []byte
	// Sender is the direct sender, or a function returning the one in
	// force.
	Sender func() message.Sender
	// Void settles a send's receipt void (its units go back).
	Void func(ctx context.Context, receipt string) error
	// MaxReceives: on this receive a message still failing is Dead.
	// Default 5 (the stack's redrive policy).
	MaxReceives int
	// Lease bounds a claim: a consumer that dies while sending holds the
	// message this long. Default 60s.
	Lease time.Duration
	// InProcess: the deliverer of an in-process queue (Local), which
	// never hands a message out again once it was sent, so a sent message
	// is not marked sent (the mark stops SQS's redeliveries): a Redis
	// exchange less a send.
	InProcess bool
	Log       *slog.Logger
}

// NewDeliverer returns the Deliverer of o.
func NewDeliverer(o DeliverOptions) (*Deliverer, error) {
	if o.Redis == nil || len(o.SealKey) == 0 || o.Sender == nil || o.Void == nil {
		return nil, errors.New("queue: a deliverer needs Redis, the seal key, a sender and the void settlement")
	}
	aead, err := sealer(o.SealKey)
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
		send: func(ctx context.Context, m message.Message) error { return sender().Send(ctx, m) }, void: o.Void,
		ledger: NewLedger(o.Redis, o.Batch), aead: aead, maxReceives: o.MaxReceives, lease: o.Lease, inProcess: o.InProcess, log: o.Log,
	}, nil
}

// errStale is a recheck's verdict after the pacer's wait: the message
// was superseded, or its code expired, while it waited for its turn.
type errStale struct{ claim Claim }

func (e errStale) Error() string {
	return "queue: the message went stale waiting for its turn: " + e.claim.String()
}

// Deliver attempts the sealed job body on its receive-th receive (the
// first is 1). For Retry it returns how long the message should wait.
func (d *Deliverer) Deliver(ctx context.Context, body string, receive int) (Outcome, time.Duration) {
	return d.deliverBody(ctx, body, receive, "")
}

// deliverBody is Deliver with its claim asked for under token (see
// deliver).
func (d *Deliverer) deliverBody(ctx context.Context, body string, receive int, token string) (Outcome, time.Duration) {
	job, err := open(d.aead, body)
	if err != nil {
		d.log.ErrorContext(ctx, "a queued message is dropped", "err", err)
		return Malformed, 0
	}
	return d.deliver(ctx, job, receive, token)
}

// deliver is Deliver of a job already opened (or never sealed: a
// JobBackend's), its claim asked for under token: empty, a new one (see
// Ledger.Claim).
func (d *Deliverer) deliver(ctx context.Context, job Job, receive int, token string) (Outcome, time.Duration) {
	claim, token, err := d.claim(ctx, job, token)
	if err != nil {
		d.log.WarnContext(ctx, "the queue's ledger does not answer", "err", err)
		return Retry, Backoff(receive) // nothing claimed, nothing to give back
	}
	switch claim {
	case ClaimDuplicate:
		return Duplicate, 0
	case ClaimDead:
		return Dead, 0
	case ClaimBusy:
		return Retry, d.lease
	case ClaimSuperseded, ClaimExpired:
		return d.neverDelivered(ctx, job, token, claim, receive), 0
	}
	err = d.send(api.WithBeforeSend(ctx, d.staleCheck(job)), job.Message)
	var stale errStale
	switch {
	case err == nil:
		d.finish(ctx, job, token, "done", false)
		return Delivered, 0
	case errors.As(err, &stale):
		d.finish(ctx, job, token, "done", receive > 1)
		if stale.claim == ClaimExpired {
			return Expired, 0
		}
		return Superseded, 0
	case errors.Is(err, message.ErrUndeliverable):
		d.finish(ctx, job, token, "done", false)
		d.log.WarnContext(ctx, "the provider refuses a queued message's destination", "channel", job.Message.Channel, "err", err)
		return Undeliverable, 0
	}
	d.log.WarnContext(ctx, "a queued message was not sent", "channel", job.Message.Channel, "receive", receive, "err", err)
	if receive < d.maxReceives {
		d.finish(ctx, job, token, "", false)
		return Retry, Backoff(receive)
	}
	d.finish(ctx, job, token, "dead", true)
	return Dead, 0
}

// claimRetries are the waits before a claim is asked again, within one
// attempt, after its answer was lost.
var claimRetries = [...]time.Duration{50 * time.Millisecond, 250 * time.Millisecond}

// claim asks the ledger for job's claim under token (a new one when
// empty) and, when no answer comes, asks again under the same token: the
// claim may have been made with its reply lost, and a new token would
// find it busy for the whole lease (a minute's delay, seen by an outside
// review). Within one attempt this deliverer alone holds the token, so
// asking twice with it is safe (see Ledger.Claim).
func (d *Deliverer) claim(ctx context.Context, job Job, token string) (Claim, string, error) {
	if token == "" {
		token = newID()
	}
	claim, held, err := d.ledger.Claim(ctx, job.Key, job.ID, job.Expires, d.lease, token)
	for _, wait := range claimRetries {
		if err == nil || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			claim, held, err = d.ledger.Claim(ctx, job.Key, job.ID, job.Expires, d.lease, token)
		}
	}
	return claim, held, err
}

// neverDelivered ends a job whose claim found it superseded or expired
// before it was sent.
func (d *Deliverer) neverDelivered(ctx context.Context, job Job, token string, claim Claim, receive int) Outcome {
	// never delivered: after a failure (an outage kept it waiting) its
	// send goes back, once; on its first receive it stays counted
	if token != "" {
		d.finish(ctx, job, token, "done", receive > 1)
	} else if receive > 1 {
		if mine, err := d.ledger.Retire(context.WithoutCancel(ctx), job.Key, job.ID); err == nil && mine {
			d.giveBack(ctx, job)
		}
	}
	if claim == ClaimExpired {
		return Expired
	}
	return Superseded
}

// staleCheck asks the ledger again once the job's turn has come: a
// resend or the code's end while it waited makes it stale.
func (d *Deliverer) staleCheck(job Job) func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := d.ledger.Current(ctx, job.Key, job.ID, job.Expires)
		if err == nil && c != Claimed {
			return errStale{c}
		}
		return nil // the ledger does not answer: send (the claim holds)
	}
}

// finish ends the claim token holds (see Ledger.Settle) and, when
// giveBack and the claim was still its own, gives the send's units back:
// once, whoever else holds the message by then.
func (d *Deliverer) finish(ctx context.Context, job Job, token, final string, giveBack bool) {
	ctx = context.WithoutCancel(ctx)
	if final == "done" && !giveBack {
		// sent (or refused by the provider): marked whoever holds the
		// claim now, so no redelivery sends it again; an in-process
		// queue redelivers nothing, and its claim lapses by itself
		if d.inProcess {
			return
		}
		if err := d.ledger.Done(ctx, job.Key, job.ID); err != nil {
			d.log.WarnContext(ctx, "a sent message was not marked sent; a redelivery within its lease finds it busy", "err", err)
		}
		return
	}
	held, err := d.ledger.Settle(ctx, job.Key, job.ID, token, final)
	if err != nil {
		d.log.WarnContext(ctx, "a claim was not settled; it lapses by itself", "final", final, "err", err)
		return
	}
	if held && giveBack {
		d.giveBack(ctx, job)
	}
}

func (d *Deliverer) giveBack(ctx context.Context, job Job) {
	if err := d.void(context.WithoutCancel(ctx), job.Message.Receipt); err != nil {
		d.log.ErrorContext(ctx, "a message never delivered did not give its send back", "err", err)
	}
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
