package delivery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/testonly/awsfake"
)

// sqsDepths answers GetQueueAttributes with the depth it has when asked
// (or a 500 while failing, or body when set), the next read held until
// hold closes when hold is set; SendMessage with an empty success.
type sqsDepths struct {
	mu      sync.Mutex
	depth   int
	failing bool
	body    string
	hold    chan struct{} // taken by the next read, which answers once it closes
	reads   int
}

func (s *sqsDepths) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	if r.Form.Get("Action") != "GetQueueAttributes" {
		fmt.Fprint(w, `<SendMessageResponse><SendMessageResult><MessageId>m</MessageId></SendMessageResult></SendMessageResponse>`)
		return
	}
	s.mu.Lock()
	s.reads++
	hold, depth, failing, body := s.hold, s.depth, s.failing, s.body
	s.hold = nil
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	switch {
	case failing:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `<ErrorResponse><Error><Code>InternalError</Code></Error></ErrorResponse>`)
	case body != "":
		fmt.Fprint(w, body)
	default:
		fmt.Fprint(w, depthAnswer(fmt.Sprint(depth), "0"))
	}
}

// depthAnswer is GetQueueAttributes's answer of values, named in turn
// as the three counts asked for (then as a fourth, unknown one).
func depthAnswer(values ...string) string {
	names := []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed", "Foo"}
	return namedAnswer(names[:len(values)], values)
}

func namedAnswer(names, values []string) string {
	var b strings.Builder
	b.WriteString(`<GetQueueAttributesResponse><GetQueueAttributesResult>`)
	for i, v := range values {
		fmt.Fprintf(&b, `<Attribute><Name>%s</Name><Value>%s</Value></Attribute>`, names[i], v)
	}
	b.WriteString(`</GetQueueAttributesResult></GetQueueAttributesResponse>`)
	return b.String()
}

func (s *sqsDepths) set(f func(*sqsDepths)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// held makes the next read wait; release (also at the test's end) lets
// it answer.
func (s *sqsDepths) held(t *testing.T) (release func()) {
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release) // a failed test leaves no read held
	s.set(func(s *sqsDepths) { s.hold = hold })
	return release
}

// testQueue is an SQS on s whose reads stay fresh for an hour (stale
// makes the one in force old), its cap capacity (0: none).
func testQueue(t *testing.T, s *sqsDepths, capacity int64) *SQS {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	q := NewSQS(awsfake.Config(srv.URL), srv.URL+"/100010001000/delivery")
	q.every, q.Cap = time.Hour, capacity
	return q
}

// stale makes the read in force older than it stays fresh.
func stale(q *SQS) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.readFrom = q.readFrom.Add(-2 * q.every)
}

// depthWithin is q.Depth, failing the test if it waits for SQS.
func depthWithin(t *testing.T, q *SQS) (int64, error) {
	t.Helper()
	type answer struct {
		n   int64
		err error
	}
	got := make(chan answer, 1)
	go func() { n, err := q.Depth(context.Background()); got <- answer{n, err} }()
	select {
	case a := <-got:
		return a.n, a.err
	case <-time.After(5 * time.Second):
		t.Fatal("the depth waited for SQS's answer")
		return 0, nil
	}
}

// settled waits for q's read beside the sends to end.
func settled(t *testing.T, q *SQS) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		busy := !q.beside.IsZero()
		q.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the depth read beside the sends never ended")
		}
	}
}

// taken waits for the held read to reach SQS (a read beside the sends
// begins on a goroutine of its own).
func (s *sqsDepths) taken(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		var waiting bool
		s.set(func(s *sqsDepths) { waiting = s.hold != nil })
		if !waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no read reached SQS")
		}
	}
}

// firstRead is q's first depth read, which must answer want.
func firstRead(t *testing.T, q *SQS, want int64) {
	t.Helper()
	if n, err := q.Depth(context.Background()); n != want || err != nil {
		t.Fatalf("the first read: %d %v, want %d", n, err, want)
	}
}

// heldBeside makes q's depth, first read as was, old, and holds the read
// beside the sends that the next Depth starts while SQS counts now: that
// Depth answers was at once. SQS has the read (taken) when it returns,
// with the function that lets it answer.
func heldBeside(t *testing.T, q *SQS, s *sqsDepths, was int64, now int) (release func()) {
	t.Helper()
	firstRead(t, q, was)
	stale(q)
	release = s.held(t)
	s.set(func(s *sqsDepths) { s.depth = now })
	if n, err := depthWithin(t, q); n != was || err != nil {
		t.Fatalf("while SQS reads: %d %v, want the last depth, %d", n, err, was)
	}
	s.taken(t)
	return release
}

func reads(s *sqsDepths) (n int) {
	s.set(func(s *sqsDepths) { n = s.reads })
	return n
}

// TestAKnownDepthIsAnsweredWithoutWaitingForSQS: once the queue's depth
// is known, a send does not wait for SQS to read it again (a second SQS
// call before every send of a quiet container): the last depth, plus
// what this container queued since, is answered at once, and the next
// send sees the new read. A message this container queued while SQS read
// is taken as counted in the read: never twice, which refused a send one
// under the cap (found by the outside review).
func TestAKnownDepthIsAnsweredWithoutWaitingForSQS(t *testing.T) {
	s := &sqsDepths{depth: 8}
	q := testQueue(t, s, 10)
	ctx := context.Background()
	release := heldBeside(t, q, s, 8, 9) // 9: the push below, as SQS counts it
	if err := q.Push(ctx, "sealed"); err != nil {
		t.Fatal(err)
	}
	if n, _ := depthWithin(t, q); n != 9 {
		t.Fatalf("after a push while SQS reads: %d, want 9", n)
	}
	release()
	settled(t, q)
	if n, err := depthWithin(t, q); n != 9 || err != nil {
		t.Fatalf("after the read: %d %v, want its 9 (the push counted once)", n, err)
	}
}

// TestAnOlderReadNeverReplacesANewerOne: a read beside the sends that
// answers after a read begun later (on a send's path, the queue at the
// cap) changes nothing: the outside review saw its old depth put back in
// force, refusing sends for a second while the queue was empty.
func TestAnOlderReadNeverReplacesANewerOne(t *testing.T) {
	s := &sqsDepths{depth: 9}
	q := testQueue(t, s, 10)
	ctx := context.Background()
	release := heldBeside(t, q, s, 9, 10)
	if err := q.Push(ctx, "sealed"); err != nil {
		t.Fatal(err)
	}
	s.set(func(s *sqsDepths) { s.depth = 0 }) // drained
	if n, err := depthWithin(t, q); n != 0 || err != nil {
		t.Fatalf("at the cap: %d %v, want 0 read on the send's path", n, err)
	}
	release() // the older read answers 10
	settled(t, q)
	if n, err := q.Depth(ctx); n != 0 || err != nil {
		t.Fatalf("after the older read answered: %d %v, want the newer 0", n, err)
	}
}

// TestAnUnknownDepthIsReadBeforeTheSend: a container that has no depth
// yet, or whose last read failed, reads it on the send's path (a cold
// container in a full queue refuses its first send); a failure is
// reported (the cap is not applied) until a read succeeds.
func TestAnUnknownDepthIsReadBeforeTheSend(t *testing.T) {
	s := &sqsDepths{depth: 7000, failing: true}
	q := testQueue(t, s, 6000)
	ctx := context.Background()
	if _, err := q.Depth(ctx); err == nil {
		t.Fatal("a failed first read reported no error")
	}
	stale(q)
	s.set(func(s *sqsDepths) { s.failing = false })
	if n, err := q.Depth(ctx); n != 7000 || err != nil {
		t.Fatalf("read again after a failure: %d %v, want 7000 at once", n, err)
	}
}

// TestAFailedReadBesideTheSendsIsReportedAtOnce: a read beside the sends
// that fails is reported by the next send (the cap not applied, logged),
// and the one after it reads on its path: an old depth is not kept on
// through failures.
func TestAFailedReadBesideTheSendsIsReportedAtOnce(t *testing.T) {
	s := &sqsDepths{depth: 12}
	q := testQueue(t, s, 0)
	firstRead(t, q, 12)
	stale(q)
	s.set(func(s *sqsDepths) { s.failing = true })
	if n, err := depthWithin(t, q); n != 12 || err != nil {
		t.Fatalf("while SQS reads: %d %v, want the last depth", n, err)
	}
	settled(t, q)
	if _, err := depthWithin(t, q); err == nil {
		t.Fatal("after a failed read, no error")
	}
	stale(q)
	s.set(func(s *sqsDepths) { s.failing = false; s.depth = 3 })
	before := reads(s)
	if n, err := q.Depth(context.Background()); n != 3 || err != nil || reads(s) != before+1 {
		t.Fatalf("after a failure: %d %v (%d reads), want 3 read on the send's path", n, err, reads(s)-before)
	}
}

// TestASlowReadBesideTheSendsIsNotWaitedOnForLong: while a read beside
// the sends has taken longer than its patience (SQS slow), the next send
// reads on its path: the old depth is not answered for as long as SQS
// takes (the outside reviews saw ten sends, and with a slower SQS up to
// the cap, admitted on it).
func TestASlowReadBesideTheSendsIsNotWaitedOnForLong(t *testing.T) {
	s := &sqsDepths{depth: 0}
	q := testQueue(t, s, 10)
	q.patience = 50 * time.Millisecond
	firstRead(t, q, 0)
	stale(q)
	s.held(t)
	s.set(func(s *sqsDepths) { s.depth = 500 })
	if n, _ := depthWithin(t, q); n != 0 {
		t.Fatalf("while SQS reads: %d, want the last depth", n)
	}
	s.taken(t)
	time.Sleep(60 * time.Millisecond)
	if n, err := depthWithin(t, q); n != 500 || err != nil {
		t.Fatalf("with the read beside the sends slower than a depth stays fresh: %d %v, want 500 read on the send's path", n, err)
	}
}

// TestALateReadIsAsOldAsWhatItCounted: a read is fresh from when it
// began, not from when its answer came: a read beside the sends that
// answers late (SQS slow, a Lambda container frozen while it read) with
// the queue full is not kept in force, and the next send reads the
// drained queue on its path (the second outside review saw a 503 with
// the queue empty for 3 s).
func TestALateReadIsAsOldAsWhatItCounted(t *testing.T) {
	s := &sqsDepths{depth: 0}
	q := testQueue(t, s, 10)
	q.every, q.patience = 200*time.Millisecond, time.Hour
	release := heldBeside(t, q, s, 0, 50)
	time.Sleep(250 * time.Millisecond) // the held read's count grows old
	s.set(func(s *sqsDepths) { s.depth = 0 })
	release()
	settled(t, q)
	if n, err := q.Depth(context.Background()); n != 0 || err != nil {
		t.Fatalf("after a read that counted 50 %s ago answered: %d %v, want the drained 0 read on the send's path", 250*time.Millisecond, n, err)
	}
}

// TestADepthAtTheCapIsReadBeforeTheSend: a last depth at or above the
// cap is read again on the send's path: once the queue has drained, the
// next send is not refused on the old read.
func TestADepthAtTheCapIsReadBeforeTheSend(t *testing.T) {
	s := &sqsDepths{depth: 9}
	q := testQueue(t, s, 10)
	ctx := context.Background()
	firstRead(t, q, 9)
	if err := q.Push(ctx, "sealed"); err != nil {
		t.Fatal(err)
	}
	stale(q)
	s.set(func(s *sqsDepths) { s.depth = 0 }) // drained
	if n, err := q.Depth(ctx); n != 0 || err != nil {
		t.Fatalf("at the cap (9 read, 1 queued since), the queue drained: %d %v, want 0 read on the send's path", n, err)
	}
}

// TestADepthThatIsNoCountIsAnError: an answer whose counts are not whole
// numbers in range, or that has none, is a failed read (the cap not
// applied, logged), never a depth that refuses every send (a huge
// number) or none (a negative one, a sum that wraps, a count read as 0).
func TestADepthThatIsNoCountIsAnError(t *testing.T) {
	waiting := "ApproximateNumberOfMessages"
	for _, body := range []string{
		depthAnswer("-1000"), depthAnswer("lots"), depthAnswer("12.0"), depthAnswer(""), depthAnswer("0", "-1"),
		depthAnswer("9223372036854775807", "1"), depthAnswer("99999999999999999999"), depthAnswer(),
		`<GetQueueAttributesResponse></GetQueueAttributesResponse>`,
		namedAnswer([]string{waiting, waiting}, []string{"1099511627775", "1099511627775"}), // a count twice
		namedAnswer([]string{"Foo"}, []string{"7"}),                                         // no count of the messages waiting
	} {
		s := &sqsDepths{body: body}
		q := testQueue(t, s, 10)
		if n, err := q.Depth(context.Background()); err == nil {
			t.Errorf("%s: %d, want an error", body, n)
		}
	}
	s := &sqsDepths{body: depthAnswer("3", "4", "0", "100")}
	if n, err := testQueue(t, s, 10).Depth(context.Background()); n != 7 || err != nil {
		t.Errorf("3 + 4 + 0 and an attribute not asked for: %d %v, want 7", n, err)
	}
}

// TestTheQueuesSettingsAreRead: DELIVERY_MODE picks the queue, whose cap
// is DELIVERY_QUEUE_MAX_DEPTH (6000 by default); a wrong setting is named.
func TestTheQueuesSettingsAreRead(t *testing.T) {
	cfg := awsfake.Config("http://127.0.0.1:1")
	for _, c := range []struct {
		env     map[string]string
		cap     int64 // 0: no queue
		problem string
	}{
		{map[string]string{}, 0, ""},
		{map[string]string{"DELIVERY_MODE": "direct"}, 0, ""},
		{map[string]string{"DELIVERY_MODE": "queue", "DELIVERY_QUEUE_URL": "http://q"}, 6000, ""},
		{map[string]string{"DELIVERY_MODE": "queue", "DELIVERY_QUEUE_URL": "http://q", "DELIVERY_QUEUE_MAX_DEPTH": "25"}, 25, ""},
		{map[string]string{"DELIVERY_MODE": "queued"}, 0, "DELIVERY_MODE"},
		{map[string]string{"DELIVERY_MODE": "queue"}, 0, "DELIVERY_QUEUE_URL"},
		{map[string]string{"DELIVERY_MODE": "queue", "DELIVERY_QUEUE_URL": "http://q", "DELIVERY_QUEUE_MAX_DEPTH": "0"}, 0, "DELIVERY_QUEUE_MAX_DEPTH"},
	} {
		var errs []error
		q := queueOf(func(k string) string { return c.env[k] }, cfg, &errs)
		err := errors.Join(errs...)
		switch {
		case c.problem != "":
			if err == nil || !strings.Contains(err.Error(), c.problem) {
				t.Errorf("%v: %v, want an error naming %s", c.env, err, c.problem)
			}
		case err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.cap == 0 && q != nil, c.cap > 0 && (q == nil || q.Cap != c.cap || q.url != c.env["DELIVERY_QUEUE_URL"]):
			t.Errorf("%v: queue %+v, want cap %d", c.env, q, c.cap)
		}
	}
}
