package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/pacer"
)

// ByChannel sends each message with the sender of its channel; a channel
// without a sender is unavailable.
type ByChannel map[message.Channel]message.Sender

// Send implements message.Sender.
func (b ByChannel) Send(ctx context.Context, m message.Message) error {
	s, ok := b[m.Channel]
	if !ok || s == nil {
		return fmt.Errorf("%w: no %s sender is configured", message.ErrUnavailable, m.Channel)
	}
	return s.Send(ctx, m)
}

// Paced sends through s at the pace of p: each send waits for its turn
// (shared by every process through the store), up to maxWait. A turn
// further away than maxWait books nothing and fails as unavailable, so a
// burst above the provider's quota is delayed a little, then refused with
// a 503, never dropped silently.
func Paced(s message.Sender, p *pacer.Pacer, maxWait time.Duration) message.Sender {
	return paced{s, p, maxWait}
}

type paced struct {
	message.Sender
	pacer   *pacer.Pacer
	maxWait time.Duration
}

func (p paced) Send(ctx context.Context, m message.Message) error {
	if err := p.pacer.Wait(ctx, p.maxWait); err != nil {
		if errors.Is(err, pacer.ErrWaitTooLong) {
			return fmt.Errorf("%w: over the provider's rate for more than %s", message.ErrUnavailable, p.maxWait)
		}
		return fmt.Errorf("%w: pace: %w", message.ErrUnavailable, err)
	}
	if check, ok := ctx.Value(beforeSendKey{}).(func(context.Context) error); ok {
		if err := check(ctx); err != nil {
			return err
		}
	}
	return p.Sender.Send(ctx, m)
}

type beforeSendKey struct{}

// WithBeforeSend makes a Paced sender call check once its turn has come,
// just before the provider: an error from check is returned as it is and
// nothing is sent (the delivery queue asks again whether its message is
// still the newest and its code alive after waiting for the turn).
func WithBeforeSend(ctx context.Context, check func(context.Context) error) context.Context {
	return context.WithValue(ctx, beforeSendKey{}, check)
}

// Timed bounds each call of s by d.
func Timed(s message.Sender, d time.Duration) message.Sender { return timed{s, d} }

type timed struct {
	message.Sender
	d time.Duration
}

func (t timed) Send(ctx context.Context, m message.Message) error {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.Sender.Send(ctx, m)
}
