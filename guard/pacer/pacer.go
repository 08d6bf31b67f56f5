// Package pacer shapes instead of policing: turns handed out at a rate
// through the guard's Store, shared by every process, so that sends keep
// to a provider's quota instead of being dropped.
package pacer

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// ErrWaitTooLong is returned by [Pacer.Reserve] and [Pacer.Wait] when the
// caller's turn is further away than it agreed to wait.
var ErrWaitTooLong = errors.New("wait too long")

// Pacer shapes instead of policing: it hands out turns at limit per period
// (a leaky bucket on the GCRA state of the token_bucket algorithm, shared
// through the Store by every process), so that sends can be paced to a
// provider's quota, such as SES's messages per second, instead of dropped.
type Pacer struct {
	store   store.Store
	spec    *store.Spec
	tag     string
	timeout time.Duration
}

// New returns a Pacer named name (one shared schedule per name) that
// allows limit turns per period, a burst of limit at most. timeout bounds
// each store call.
func New(st store.Store, name string, limit int64, per, timeout time.Duration) (*Pacer, error) {
	if limit < 1 || per < time.Millisecond || timeout <= 0 {
		return nil, fmt.Errorf("pacer %s: limit must be ≥ 1, period ≥ 1ms and timeout > 0", name)
	}
	sum := sha256.Sum256([]byte("pace\x00" + name))
	return &Pacer{store: st, spec: &store.Spec{ID: "pc", Algorithm: store.TokenBucket, Limit: limit, Window: per},
		tag: "p" + base64.RawURLEncoding.EncodeToString(sum[:9]), timeout: timeout}, nil
}

// Reserve books the next turn and returns how long the caller must wait
// for it (0: now). If that wait would exceed maxWait it books nothing and
// returns the wait with ErrWaitTooLong.
func (p *Pacer) Reserve(ctx context.Context, maxWait time.Duration) (time.Duration, error) {
	return p.ReserveN(ctx, 1, maxWait)
}

// ReserveN is Reserve for n turns at once.
func (p *Pacer) ReserveN(ctx context.Context, n int64, maxWait time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	res, err := p.store.Do(ctx, []store.Op{{Kind: store.Reserve, Spec: p.spec, Tag: p.tag, Cost: n, MaxWait: maxWait}})
	if err != nil {
		return 0, fmt.Errorf("reserve a turn: %w", err)
	}
	if len(res) != 1 {
		return 0, fmt.Errorf("reserve a turn: %w: no result", store.ErrStoreUnavailable)
	}
	if !res[0].Allowed {
		return res[0].RetryAfter, ErrWaitTooLong
	}
	return res[0].RetryAfter, nil
}

// Wait reserves a turn and sleeps until it comes, or returns early with
// the context's error.
func (p *Pacer) Wait(ctx context.Context, maxWait time.Duration) error {
	d, err := p.Reserve(ctx, maxWait)
	if err != nil || d <= 0 {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
