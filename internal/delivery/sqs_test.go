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

// sqsDepths answers GetQueueAttributes with its depth (or a 500 while
// failing), holding each answer while held is set, and SendMessage with
// an empty success.
type sqsDepths struct {
	mu      sync.Mutex
	depth   int
	failing bool
	held    chan struct{} // while not nil, a depth read waits for it to close
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
	held := s.held
	s.mu.Unlock()
	if held != nil {
		<-held
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `<ErrorResponse><Error><Code>InternalError</Code></Error></ErrorResponse>`)
		return
	}
	fmt.Fprintf(w, `<GetQueueAttributesResponse><GetQueueAttributesResult>`+
		`<Attribute><Name>ApproximateNumberOfMessages</Name><Value>%d</Value></Attribute>`+
		`<Attribute><Name>ApproximateNumberOfMessagesNotVisible</Name><Value>0</Value></Attribute>`+
		`</GetQueueAttributesResult></GetQueueAttributesResponse>`, s.depth)
}

func (s *sqsDepths) set(f func(*sqsDepths)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// staleQueue is an SQS whose depth reads are never fresh: every Depth
// after the first known one reads again.
func staleQueue(t *testing.T, s *sqsDepths) *SQS {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	q := NewSQS(awsfake.Config(srv.URL), srv.URL+"/100010001000/delivery")
	q.every = 0
	return q
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

// settled waits for q's read off the send's path to end.
func settled(t *testing.T, q *SQS) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		busy := q.refreshing
		q.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the depth read off the send's path never ended")
		}
	}
}

// TestAKnownDepthIsAnsweredWithoutWaitingForSQS: once the queue's depth
// is known, a send does not wait for SQS to read it again (a second SQS
// call before every send of a quiet container): the last depth, plus
// what this container queued since, is answered at once and the next
// send sees the new read. A message queued while it reads stays counted.
func TestAKnownDepthIsAnsweredWithoutWaitingForSQS(t *testing.T) {
	s := &sqsDepths{depth: 5}
	q := staleQueue(t, s)
	ctx := context.Background()
	if n, err := q.Depth(ctx); n != 5 || err != nil {
		t.Fatalf("the first read: %d %v, want 5", n, err)
	}
	held := make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(held) }) }) // a failed test leaves no read held
	s.set(func(s *sqsDepths) { s.held, s.depth = held, 40 })
	if n, err := depthWithin(t, q); n != 5 || err != nil {
		t.Fatalf("while SQS reads: %d %v, want the last depth, 5", n, err)
	}
	if err := q.Push(ctx, "sealed"); err != nil {
		t.Fatal(err)
	}
	if n, _ := depthWithin(t, q); n != 6 {
		t.Fatalf("after a push while SQS reads: %d, want 6", n)
	}
	s.set(func(s *sqsDepths) { s.held = nil })
	release.Do(func() { close(held) })
	settled(t, q)
	if n, _ := depthWithin(t, q); n != 41 {
		t.Fatalf("after the read: %d, want its 40 and the push made while it read", n)
	}
	settled(t, q)
	if n, _ := depthWithin(t, q); n != 40 {
		t.Fatalf("after a read that began after the push: %d, want 40", n)
	}
}

// TestAnUnknownDepthIsReadBeforeTheSend: a container that has no depth
// yet, or whose last read failed, reads it on the send's path (a cold
// container in a full queue refuses its first send); a failure is
// reported (the cap is not applied) until a read succeeds.
func TestAnUnknownDepthIsReadBeforeTheSend(t *testing.T) {
	s := &sqsDepths{depth: 7000, failing: true}
	q := staleQueue(t, s)
	ctx := context.Background()
	if _, err := q.Depth(ctx); err == nil {
		t.Fatal("a failed first read reported no error")
	}
	s.set(func(s *sqsDepths) { s.failing = false })
	if n, err := q.Depth(ctx); n != 7000 || err != nil {
		t.Fatalf("read again after a failure: %d %v, want 7000 at once", n, err)
	}
}

// TestDepthReadsFailingInARowReportItUnknown: reads off the send's path
// that fail keep the last depth for two failures (a frozen container's
// read can time out once), and the third reports the depth unknown; the
// next send then reads it on its path.
func TestDepthReadsFailingInARowReportItUnknown(t *testing.T) {
	s := &sqsDepths{depth: 12}
	q := staleQueue(t, s)
	if n, err := q.Depth(context.Background()); n != 12 || err != nil {
		t.Fatalf("the first read: %d %v", n, err)
	}
	s.set(func(s *sqsDepths) { s.failing = true })
	for i := range 3 {
		n, err := depthWithin(t, q)
		settled(t, q)
		if n != 12 || err != nil {
			t.Fatalf("send %d, %d reads failed before it: %d %v, want the last depth", i+1, i, n, err)
		}
	}
	if _, err := depthWithin(t, q); err == nil {
		t.Fatal("after 3 failed reads in a row, no error")
	}
	s.set(func(s *sqsDepths) { s.failing = false; s.depth = 3 })
	var before, after int
	s.set(func(s *sqsDepths) { before = s.reads })
	n, err := q.Depth(context.Background())
	s.set(func(s *sqsDepths) { after = s.reads })
	if n != 3 || err != nil || after != before+1 {
		t.Fatalf("read on the send's path: %d %v (%d reads), want 3 from one read", n, err, after-before)
	}
}

// TestADepthAtTheCapIsReadBeforeTheSend: a last depth at or above the
// cap is read again on the send's path: once the queue has drained, the
// next send is not refused on the old read.
func TestADepthAtTheCapIsReadBeforeTheSend(t *testing.T) {
	s := &sqsDepths{depth: 9}
	q := staleQueue(t, s)
	q.Cap = 10
	ctx := context.Background()
	if n, err := q.Depth(ctx); n != 9 || err != nil {
		t.Fatalf("the first read: %d %v", n, err)
	}
	if err := q.Push(ctx, "sealed"); err != nil {
		t.Fatal(err)
	}
	s.set(func(s *sqsDepths) { s.depth = 0 }) // drained
	if n, err := q.Depth(ctx); n != 0 || err != nil {
		t.Fatalf("at the cap (9 read, 1 queued since), the queue drained: %d %v, want 0 read on the send's path", n, err)
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
