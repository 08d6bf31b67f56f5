// Package outbox is the development sender of `make run`: instead of
// sending, it writes each message as one JSON line
//
//	{"channel","to","purpose","code","body","sentAt"}
//
// to stderr, or appends it to the OUTBOX_PATH file. It is never part of a
// Lambda build (the functions do not import it).
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/otpguard/otpguard/guard/message"
)

// Outbox writes messages to w, one JSON line each.
type Outbox struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

// New returns an Outbox on w. now stamps sentAt (time.Now when nil); the
// stamp is informative only, no limit depends on it.
func New(w io.Writer, now func() time.Time) *Outbox {
	if now == nil {
		now = time.Now
	}
	return &Outbox{w: w, now: now}
}

// Line is one outbox entry.
type Line struct {
	Channel string    `json:"channel"`
	To      string    `json:"to"`
	Purpose string    `json:"purpose"`
	Code    string    `json:"code"`
	Body    string    `json:"body"`
	SentAt  time.Time `json:"sentAt"`
}

// Send writes m as one line; concurrent sends never interleave.
func (o *Outbox) Send(_ context.Context, m message.Message) error {
	b, err := json.Marshal(Line{Channel: string(m.Channel), To: m.To, Purpose: m.Purpose, Code: m.Code, Body: m.Text, SentAt: o.now().UTC()})
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err := o.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%w: outbox: %w", message.ErrUnavailable, err)
	}
	return nil
}
