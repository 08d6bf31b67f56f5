package app_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// inbox is a provider that keeps what it is given.
type inbox struct {
	mu   sync.Mutex
	sent []message.Message
}

func (b *inbox) Send(_ context.Context, m message.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sent = append(b.sent, m)
	return nil
}

// reorder holds the first of two messages until the second comes, then
// queues them the later code first: the order two sends at once can take
// (A's code stored, B's code stored, B queued, A queued).
type reorder struct {
	inner   message.Sender
	mu      sync.Mutex
	waiting []held
}

type held struct {
	ctx  context.Context
	m    message.Message
	done chan error
}

func (r *reorder) Send(ctx context.Context, m message.Message) error {
	h := held{ctx, m, make(chan error, 1)}
	r.mu.Lock()
	r.waiting = append(r.waiting, h)
	both := r.waiting
	if len(both) == 2 {
		r.waiting = nil
	}
	r.mu.Unlock()
	if len(both) == 2 {
		slices.SortFunc(both, func(a, b held) int { return cmp.Compare(b.m.Version, a.m.Version) })
		for _, x := range both {
			x.done <- r.inner.Send(x.ctx, x.m)
		}
	}
	return <-h.done
}

// TestOfTwoSendsAtOnceTheCodeDeliveredVerifies: two sends to one address
// at once (a double click: the default rules allow two a minute), the
// later code's message queued before the earlier one's. The message
// delivered is the one whose code the store kept, and it verifies. An
// outside review found the message queued last delivered instead: the
// user got a code that no longer verified (1 to 10 of 30 addresses
// sent six codes at once).
func TestOfTwoSendsAtOnceTheCodeDeliveredVerifies(t *testing.T) {
	box := &inbox{}
	var local *queue.Local
	h := &harness{app: startApp(t, app.Settings{Senders: func(h queue.Host) (message.Sender, error) {
		q, l, err := queue.InProcess(h, box, 2, queue.Options{})
		local = l
		return &reorder{inner: q}, err
	}})}
	t.Cleanup(local.Close)
	ctx := context.Background()
	const send = `{"channel":"email","to":"ann@example.com","purpose":"login"}`
	var wg sync.WaitGroup
	for _, ip := range []string{"198.51.100.1", "198.51.100.2"} {
		wg.Go(func() {
			if w := h.post(ctx, "/v1/otp/send", send, ip); w.Code != 202 {
				t.Errorf("send: %d %s", w.Code, w.Body)
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if d, _ := local.Depth(ctx); d == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue did not drain")
		}
	}
	box.mu.Lock()
	sent := slices.Clone(box.sent)
	box.mu.Unlock()
	if len(sent) != 1 {
		t.Fatalf("%d messages delivered, want the newest code's alone", len(sent))
	}
	body, _ := json.Marshal(map[string]string{"to": "ann@example.com", "purpose": "login", "code": sent[0].Code})
	if w := h.post(ctx, "/v1/otp/verify", string(body), "198.51.100.3"); w.Code != 200 {
		t.Fatalf("the code delivered does not verify: %d %s", w.Code, w.Body)
	}
}

// gate is a provider that passes its first message and holds the rest
// until open is closed.
type gate struct {
	inbox
	open  chan struct{}
	n     atomic.Int32
	local *queue.Local
}

func (g *gate) Send(ctx context.Context, m message.Message) error {
	if g.n.Add(1) > 1 {
		<-g.open
	}
	return g.inbox.Send(ctx, m)
}

// gatedQueue starts the composed server with s, its sender an
// in-process queue of one message (MaxDepth 1) whose provider is g.
func gatedQueue(t *testing.T, s app.Settings) (*harness, *gate) {
	return gatedQueueOf(t, s, 1)
}

// gatedQueueOf is gatedQueue with a queue of depth messages.
func gatedQueueOf(t *testing.T, s app.Settings, depth int64) (*harness, *gate) {
	g := &gate{open: make(chan struct{})}
	var local *queue.Local
	s.Senders = func(h queue.Host) (message.Sender, error) {
		q, l, err := queue.InProcess(h, g, 1, queue.Options{MaxDepth: depth})
		local = l
		return q, err
	}
	h := &harness{app: startApp(t, s)}
	g.local = local
	t.Cleanup(func() { close(g.open); local.Close() })
	return h, g
}

// fill sends another address a code after g passed its first message:
// that message is held at the provider, and the queue is full. It first
// waits for the first message to leave the queue: until its delivery
// returns it counts in the depth, and the other send would be refused.
func fill(t *testing.T, h *harness, g *gate) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if d, _ := g.local.Depth(context.Background()); d == 0 && g.n.Load() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first message did not leave the queue")
		}
	}
	if w := h.post(context.Background(), "/v1/otp/send", `{"channel":"email","to":"bob@example.com","purpose":"login"}`, "198.51.100.2"); w.Code != 202 {
		t.Fatalf("another send: %d %s", w.Code, w.Body)
	}
	for deadline := time.Now().Add(5 * time.Second); g.n.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second message did not reach the provider")
		}
	}
}

// TestASendRefusedForAFullQueueLeavesTheOwnersCode: while the queue is
// full, a send to an address (anyone's, its units given back) is refused
// before it replaces the code the owner already has, which still
// verifies. The second outside review found the code replaced: a
// stranger could spoil an owner's code for free while the queue was full.
func TestASendRefusedForAFullQueueLeavesTheOwnersCode(t *testing.T) {
	h, g := gatedQueue(t, app.Settings{})
	ctx := context.Background()
	if w := h.post(ctx, "/v1/otp/send", `{"channel":"email","to":"ann@example.com","purpose":"login"}`, "198.51.100.1"); w.Code != 202 {
		t.Fatalf("the owner's send: %d %s", w.Code, w.Body)
	}
	fill(t, h, g)
	if w := h.post(ctx, "/v1/otp/send", `{"channel":"email","to":"ann@example.com","purpose":"login"}`, "198.51.100.3"); w.Code != 503 {
		t.Fatalf("a send while the queue is full: %d %s, want 503", w.Code, w.Body)
	}
	g.inbox.mu.Lock()
	code := g.inbox.sent[0].Code
	g.inbox.mu.Unlock()
	body, _ := json.Marshal(map[string]string{"to": "ann@example.com", "purpose": "login", "code": code})
	if w := h.post(ctx, "/v1/otp/verify", string(body), "198.51.100.4"); w.Code != 200 {
		t.Fatalf("the owner's code after a refused send: %d %s", w.Code, w.Body)
	}
}

// TestSendsAtOnceNeverPassTheQueuesCap: the local server's queue cap
// (DELIVERY_QUEUE_MAX_DEPTH) holds for sends that arrive together: each
// takes its place with the room it asks for, before its code is stored.
// An outside review saw 128 sends at once all queued past a cap of 5.
func TestSendsAtOnceNeverPassTheQueuesCap(t *testing.T) {
	h, g := gatedQueueOf(t, app.Settings{}, 4)
	if w := h.post(context.Background(), "/v1/otp/send", `{"channel":"email","to":"ann@example.com","purpose":"login"}`, "198.51.100.1"); w.Code != 202 {
		t.Fatalf("the first send: %d %s", w.Code, w.Body)
	}
	fill(t, h, g) // one message held at the provider: room for 3
	codes := make([]int, 24)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() {
			body, _ := json.Marshal(map[string]string{"channel": "email", "to": fmt.Sprintf("burst%d@example.com", i), "purpose": "login"})
			codes[i] = h.post(context.Background(), "/v1/otp/send", string(body), fmt.Sprintf("203.0.113.%d", 10+i)).Code
		})
	}
	wg.Wait()
	if n202, n503 := count(codes, 202), count(codes, 503); n202 != 3 || n503 != 21 {
		t.Fatalf("24 sends at once with room for 3: %d answered 202, %d 503 (%v)", n202, n503, codes)
	}
}

// TestSendsRefusedForAFullQueueAreNotLoggedEach: a flood of sends while
// the queue is full writes the queue's paced line, not an ERROR line per
// send (each refusal is in its decision record).
func TestSendsRefusedForAFullQueueAreNotLoggedEach(t *testing.T) {
	var logs testutil.Buffer
	h, g := gatedQueue(t, app.Settings{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if w := h.post(context.Background(), "/v1/otp/send", `{"channel":"email","to":"ann@example.com","purpose":"login"}`, "198.51.100.1"); w.Code != 202 {
		t.Fatalf("the first send: %d %s", w.Code, w.Body)
	}
	fill(t, h, g)
	for i := range 10 {
		body := fmt.Sprintf(`{"channel":"email","to":"flood%d@example.com","purpose":"login"}`, i)
		if w := h.post(context.Background(), "/v1/otp/send", body, fmt.Sprintf("203.0.113.%d", 100+i)); w.Code != 503 {
			t.Fatalf("a send while the queue is full: %d %s", w.Code, w.Body)
		}
	}
	out := logs.String()
	if n, errs := strings.Count(out, "queue is full"), strings.Count(out, "level=ERROR"); n != 1 || errs != 0 {
		t.Fatalf("10 sends refused: %d lines of the queue's fullness (want 1), %d ERROR lines (want 0):\n%s", n, errs, out)
	}
}

func count(codes []int, code int) (n int) {
	for _, c := range codes {
		if c == code {
			n++
		}
	}
	return n
}

// confirming is an authenticator whose accounts are confirmed by a code
// (as the local users are): a signup sends a code of purpose signup.
type confirming struct{ auth }

func (*confirming) Confirm(context.Context, string) error { return nil }

// TestASignupRefusedForAFullQueueLeavesTheOwnersCode: a signup's code
// asks the queue for room before it replaces the one the address's owner
// has: a stranger's signups for that address while the queue is full
// (answered 202, as every signup is) leave the owner's code verifying.
func TestASignupRefusedForAFullQueueLeavesTheOwnersCode(t *testing.T) {
	var logs testutil.Buffer
	h, g := gatedQueue(t, app.Settings{Auth: &confirming{}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	signup := `{"email":"ann@example.com","password":"a long enough passphrase"}`
	if w := h.post(ctx, "/v1/signup", signup, "198.51.100.1"); w.Code != 202 {
		t.Fatalf("the owner's signup: %d %s", w.Code, w.Body)
	}
	fill(t, h, g)
	if w := h.post(ctx, "/v1/signup", signup, "198.51.100.3"); w.Code != 202 {
		t.Fatalf("a signup while the queue is full: %d %s, want 202 (no code sent)", w.Code, w.Body)
	}
	// its decision record says no code went (the second review found it
	// "pending" as any other, and no line of its own)
	if out := logs.String(); strings.Count(out, "outcome=pending:delivery_unavailable") != 1 || strings.Count(out, "outcome=pending ") != 1 {
		t.Fatalf("the records of a signup sent and one refused for a full queue:\n%s", out)
	}
	g.inbox.mu.Lock()
	first := g.inbox.sent[0]
	g.inbox.mu.Unlock()
	if first.Purpose != "signup" {
		t.Fatalf("the first message is %q's", first.Purpose)
	}
	body, _ := json.Marshal(map[string]string{"to": "ann@example.com", "purpose": "signup", "code": first.Code})
	if w := h.post(ctx, "/v1/otp/verify", string(body), "198.51.100.4"); w.Code != 200 {
		t.Fatalf("the owner's signup code after a refused signup: %d %s", w.Code, w.Body)
	}
}

// filling is a queue backend (in process: it keeps the jobs as they
// are) whose depth is 0 for its next `room` reads, then its cap: the
// queue fills between a send's room check and its Send (other
// containers' sends, a depth read again in between).
type filling struct {
	mu   sync.Mutex
	jobs []queue.Job
	room int
}

func (f *filling) Push(context.Context, string) error { panic("an in-process backend is given jobs") }

func (f *filling) PushJob(_ context.Context, j queue.Job) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, j)
	return nil
}

func (f *filling) Depth(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.room > 0 {
		f.room--
		return 0, nil
	}
	return 1, nil
}

// TestASendTheQueueHadRoomForIsQueued: a send asks the queue for room
// once, before it replaces the address's code; queued after that, it is
// never refused (the cap is soft). The outside review of the depth read
// beside the sends found the second check refusing such a send with its
// code already replaced: the owner's code spoiled, and no message.
func TestASendTheQueueHadRoomForIsQueued(t *testing.T) {
	f := &filling{}
	h := &harness{app: startApp(t, app.Settings{Auth: &confirming{}, Senders: func(h queue.Host) (message.Sender, error) {
		return queue.New(h, f, queue.Options{MaxDepth: 1})
	}})}
	ctx := context.Background()
	for _, path := range []struct{ url, body string }{
		{"/v1/otp/send", `{"channel":"email","to":"ann@example.com","purpose":"login"}`},
		{"/v1/signup", `{"email":"bob@example.com","password":"a long enough passphrase"}`},
	} {
		f.mu.Lock()
		f.room, f.jobs = 1, nil // room for the send's own check, full after it
		f.mu.Unlock()
		if w := h.post(ctx, path.url, path.body, "198.51.100.1"); w.Code != 202 {
			t.Fatalf("%s with room at its check: %d %s", path.url, w.Code, w.Body)
		}
		f.mu.Lock()
		jobs := f.jobs
		f.mu.Unlock()
		if len(jobs) != 1 {
			t.Fatalf("%s: %d messages queued, want its code's", path.url, len(jobs))
		}
		m := jobs[0].Message
		body, _ := json.Marshal(map[string]string{"to": m.To, "purpose": m.Purpose, "code": m.Code})
		if w := h.post(ctx, "/v1/otp/verify", string(body), "198.51.100.2"); w.Code != 200 {
			t.Fatalf("%s: the queued code: %d %s", path.url, w.Code, w.Body)
		}
	}
}

// TestASendQueuedInProcessTakesThreeExchanges: a send through the local
// server's in-process queue takes three Redis exchanges (its decision,
// its code, the delivery's claim) and none to queue its message: the
// code store's number of the code says which message of the slot is the
// newest. It took four while the queue wrote a ledger entry of its own.
func TestASendQueuedInProcessTakesThreeExchanges(t *testing.T) {
	box := &inbox{}
	var n atomic.Int64
	var local *queue.Local
	h := &harness{app: startApp(t, app.Settings{Senders: func(h queue.Host) (message.Sender, error) {
		h.Redis.AddHook(redistest.RoundTrips{N: &n})
		q, l, err := queue.InProcess(h, box, 1, queue.Options{})
		local = l
		return q, err
	}})}
	t.Cleanup(local.Close)
	ctx := context.Background()
	for i, to := range []string{"ann@example.com", "bob@example.com", "ann@example.com"} {
		before := n.Load()
		send := `{"channel":"email","to":"` + to + `","purpose":"login"}`
		if w := h.post(ctx, "/v1/otp/send", send, "198.51.100.1"); w.Code != 202 {
			t.Fatalf("send %d: %d %s", i, w.Code, w.Body)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			box.mu.Lock()
			delivered := len(box.sent)
			box.mu.Unlock()
			if d, _ := local.Depth(ctx); d == 0 && delivered == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("send %d was not delivered", i)
			}
		}
		if got := n.Load() - before; got != 3 {
			t.Errorf("send %d took %d Redis exchanges, want 3", i, got)
		}
	}
}
