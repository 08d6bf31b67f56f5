package api_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/delivery/queue"
)

// provider is a sender whose next answer the test sets; with backlog,
// it is a queue.
type provider struct {
	mu      sync.Mutex
	err     error
	sent    int
	backlog time.Duration
}

func (p *provider) Send(context.Context, message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.sent++
	return nil
}

func (p *provider) set(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

type queued struct{ *provider }

func (q queued) Backlog(context.Context, message.Channel) time.Duration { return q.backlog }

// full is the queue's refusal when too many messages wait.
type full struct{}

func (full) Error() string          { return "the queue is full" }
func (full) RetryIn() time.Duration { return 7 * time.Second }

const sendRules = `rules:
  - {name: per-dest, action: otp.send, key: [destination], limit: 2, window: 1m}
  - {name: per-dest-daily, action: otp.send, key: [destination], limit: 10, window: 24h}
  - {name: quick-shadow, action: otp.send, key: [destination], limit: 1, window: 10s, mode: shadow}
  - {name: pair, action: otp.send, key: [destination, ip], limit: 9, window: 5s}
`

// TestSendAnswers: a send's fields are checked; an allowed send answers
// 202 with the masked address, the code's life and the configured pace
// (the slowest destination rule over its shortest window, never a shadow
// one nor one keyed on more); past a rule it is a 429 naming it; a
// provider failure gives the send back and answers 503; a destination the
// provider refuses is a 400 and stays counted; a full queue says when to
// retry; a queue says so and its wait.
func TestSendAnswers(t *testing.T) {
	p := &provider{}
	h, _ := serve(t, sendRules, func(s *app.Settings) {
		s.Senders = func(queue.Host) (message.Sender, error) { return p, nil }
	})
	send := func(to string) (int, map[string]any, string) {
		t.Helper()
		w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"to": to, "channel": "email", "purpose": "login"}, false)
		return w.Code, m, w.Header().Get("Retry-After")
	}
	for _, c := range []struct {
		body  map[string]string
		field string
		want  string
	}{
		{map[string]string{"to": "ann@example.com", "purpose": "login"}, "channel", "required: email or sms"},
		{map[string]string{"to": "ann@example.com", "channel": "fax", "purpose": "login"}, "channel", "must be email or sms"},
		{map[string]string{"to": "ann", "channel": "email", "purpose": "login"}, "to", ""},
		{map[string]string{"to": "12", "channel": "sms", "purpose": "login"}, "to", ""},
		{map[string]string{"to": "ann@example.com", "channel": "email"}, "purpose", "required: one of signup, login, reset, verify"},
		{map[string]string{"to": "ann@example.com", "channel": "email", "purpose": "login", "locale": "not a tag"}, "locale", "must be a BCP 47 language tag such as en or fr-CA"},
	} {
		w, m := call(t, h, "POST", "/v1/otp/send", c.body, false)
		problemOf(t, w, m, 400, "invalid_request")
		got, ok := errorsOf(m)[c.field].(string)
		if !ok || (c.want != "" && got != c.want) || len(errorsOf(m)) != 1 {
			t.Errorf("%v: errors %v, want only %s: %q", c.body, errorsOf(m), c.field, c.want)
		}
	}
	code, m, _ := send("ann@example.com")
	if code != 202 || m["status"] != "pending" || m["channel"] != "email" || m["to"] != "a***@example.com" ||
		m["expiresIn"] != float64(600) || m["resendIn"] != float64(30) || m["queued"] != nil || p.sent != 1 {
		t.Fatalf("a send: %d %v (%d sent)", code, m, p.sent)
	}
	send("ann@example.com")
	code, m, retry := send("ann@example.com")
	if n, _ := strconv.Atoi(retry); code != 429 || m["rule"] != "per-dest" || n < 1 || n > 60 || m["retryAfter"] != float64(n) {
		t.Fatalf("past the limit: %d %v Retry-After %q", code, m, retry)
	}

	// a provider that fails gives the send back
	p.set(errors.New("provider down"))
	code, m, _ = send("bob@example.com")
	if code != 503 || m["code"] != "delivery_unavailable" {
		t.Fatalf("a provider failure: %d %v", code, m)
	}
	p.set(nil)
	for i := range 2 {
		if code, m, _ := send("bob@example.com"); code != 202 {
			t.Fatalf("after the failure, send %d: %d %v", i+1, code, m)
		}
	}
	// a refused destination stays counted
	p.set(message.ErrUndeliverable)
	code, m, _ = send("cat@example.com")
	if code != 400 || errorsOf(m)["to"] != "the message provider refuses this destination" {
		t.Fatalf("a refused destination: %d %v", code, m)
	}
	p.set(nil)
	send("cat@example.com")
	if code, _, _ := send("cat@example.com"); code != 429 {
		t.Errorf("the refused send was not counted: %d", code)
	}
	// a full queue
	p.set(full{})
	code, m, retry = send("dan@example.com")
	if code != 503 || m["code"] != "delivery_unavailable" || retry != "7" || m["retryAfter"] != float64(7) {
		t.Errorf("a full queue: %d %v Retry-After %q", code, m, retry)
	}

	// a queue: queued, and its wait when others are ahead
	q := queued{&provider{backlog: 4500 * time.Millisecond}}
	h, _ = serve(t, sendRules, func(s *app.Settings) {
		s.Senders = func(queue.Host) (message.Sender, error) { return q, nil }
	})
	w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"to": "ann@example.com", "channel": "email", "purpose": "login"}, false)
	if w.Code != 202 || m["queued"] != true || m["deliveryEta"] != float64(4) {
		t.Errorf("a queued send: %d %v", w.Code, m)
	}

	// no sender at all
	h, _ = serve(t, sendRules, func(s *app.Settings) { s.Senders = nil })
	w, m = call(t, h, "POST", "/v1/otp/send", map[string]string{"to": "ann@example.com", "channel": "email", "purpose": "login"}, false)
	problemOf(t, w, m, 503, "delivery_unavailable")
}
