package api_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/pacer"
	"github.com/otpguard/otpguard/guard/store"
)

// recorder is a sender that keeps what it was given and the context's
// deadline.
type recorder struct {
	mu        sync.Mutex
	sent      []message.Message
	deadlines []time.Time
}

func (r *recorder) Send(ctx context.Context, m message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, _ := ctx.Deadline()
	r.sent, r.deadlines = append(r.sent, m), append(r.deadlines, d)
	return nil
}

type failingStore struct{}

func (failingStore) Do(context.Context, []store.Op) ([]store.OpResult, error) {
	return nil, store.ErrStoreUnavailable
}

// TestByChannel: each message goes to its channel's sender; a channel
// without one is unavailable and nothing is sent.
func TestByChannel(t *testing.T) {
	mail := &recorder{}
	b := api.ByChannel{message.Email: mail, message.SMS: nil}
	if err := b.Send(context.Background(), message.Message{Channel: message.Email, To: "a@example.com"}); err != nil || len(mail.sent) != 1 {
		t.Fatalf("email: %v, %d sent", err, len(mail.sent))
	}
	for _, m := range []message.Message{{Channel: message.SMS}, {Channel: "voice"}} {
		if err := b.Send(context.Background(), m); !errors.Is(err, message.ErrUnavailable) {
			t.Errorf("%s: %v", m.Channel, err)
		}
	}
	if len(mail.sent) != 1 {
		t.Errorf("%d sent", len(mail.sent))
	}
}

// TestTimed: each send runs under the bound.
func TestTimed(t *testing.T) {
	r := &recorder{}
	before := time.Now()
	if err := api.Timed(r, 3*time.Second).Send(context.Background(), message.Message{}); err != nil {
		t.Fatal(err)
	}
	if d := r.deadlines[0]; d.IsZero() || d.Before(before.Add(3*time.Second)) || d.After(time.Now().Add(3*time.Second)) {
		t.Errorf("deadline %v, sent between %v and now, bound 3s", d, before)
	}
}

// TestPaced: sends within the pace go at once; one whose turn is further
// than the wait allowed is unavailable and books nothing; one that waits
// goes when its turn comes, after the before-send check, whose error
// stops it; a store that fails makes the send unavailable.
func TestPaced(t *testing.T) {
	ctx := context.Background()
	p, err := pacer.New(memstore.New(time.Now), "ses", 2, time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	now := api.Paced(r, p, 0)
	for i := range 2 {
		if err := now.Send(ctx, message.Message{}); err != nil {
			t.Fatalf("send %d: %v", i+1, err)
		}
	}
	if err := now.Send(ctx, message.Message{}); !errors.Is(err, message.ErrUnavailable) || len(r.sent) != 2 {
		t.Fatalf("a third at once: %v, %d sent", err, len(r.sent))
	}
	waits := api.Paced(r, p, 2*time.Second)
	var checked time.Duration
	start := time.Now()
	stop := errors.New("superseded")
	cctx := api.WithBeforeSend(ctx, func(context.Context) error { checked = time.Since(start); return stop })
	if err := waits.Send(cctx, message.Message{}); err != stop || len(r.sent) != 2 {
		t.Fatalf("a check's error: %v, %d sent", err, len(r.sent))
	}
	if checked < 300*time.Millisecond {
		t.Errorf("the check ran after %s, before the turn (≈ 500ms)", checked)
	}
	start = time.Now()
	if err := waits.Send(ctx, message.Message{}); err != nil || len(r.sent) != 3 {
		t.Fatalf("a send that waits: %v, %d sent", err, len(r.sent))
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("sent after %s, before its turn (≈ 500ms)", d)
	}
	broken, _ := pacer.New(failingStore{}, "ses", 2, time.Second, time.Second)
	if err := api.Paced(r, broken, time.Second).Send(ctx, message.Message{}); !errors.Is(err, message.ErrUnavailable) || len(r.sent) != 3 {
		t.Errorf("a failing store: %v", err)
	}
	if _, err := pacer.New(failingStore{}, "x", 0, time.Second, time.Second); err == nil {
		t.Error("a pacer of limit 0")
	}
}
