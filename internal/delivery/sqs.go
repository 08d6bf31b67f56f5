package delivery

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/internal/awsjson"
)

// SQS is the delivery queue (DeliveryMode queue) over SQS's query
// protocol, signed with the SDK's SigV4 signer like Publish: SendMessage
// for the functions that queue, GetQueueAttributes for the queue's depth
// (read at most once a second per container, off the send's path once
// known: see Depth), and ChangeMessageVisibility for the consumer's
// backoff. The event source mapping receives and deletes.
type SQS struct {
	*awsjson.Signed
	url string
	// every is how long a depth read is fresh (a second).
	every time.Duration
	// Cap is the depth at which the queue refuses sends
	// (DELIVERY_QUEUE_MAX_DEPTH): a last depth at or above it is read
	// again on the send's path, so a send is never refused on an old
	// read. 0: none.
	Cap int64

	mu         sync.Mutex
	depth      int64
	depthErr   error
	depthRead  time.Time // the last read's end, failed or not; zero: none yet
	pushed     int64     // by this container since the depth was read
	refreshing bool      // a read off the send's path is under way
	failures   int       // reads failed in a row
}

// NewSQS returns the queue at queueURL, in cfg's region.
func NewSQS(cfg aws.Config, queueURL string) *SQS {
	return &SQS{Signed: awsjson.NewSigned(cfg, "sqs", 5*time.Second), url: queueURL, every: time.Second}
}

// refreshFailures is how many reads off the send's path fail in a row
// before the depth is reported unknown (the cap not applied, logged)
// and read on the send's path again. One failure is not enough: a
// Lambda container frozen between invocations can find a read it began
// timed out when it thaws.
const refreshFailures = 3

func (q *SQS) call(ctx context.Context, form url.Values, out any) error {
	form.Set("Version", "2012-11-05")
	form.Set("QueueUrl", q.url)
	status, _, raw, err := q.Post(ctx, q.url, "application/x-www-form-urlencoded; charset=utf-8", nil, []byte(form.Encode()))
	if err != nil {
		return fmt.Errorf("sqs %s: %w", form.Get("Action"), err)
	}
	if status/100 != 2 {
		var e struct {
			Error struct{ Code string } `xml:"Error"`
		}
		_ = xml.Unmarshal(raw, &e)
		return fmt.Errorf("sqs %s: HTTP %d %s", form.Get("Action"), status, e.Error.Code)
	}
	if out != nil {
		if err := xml.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("sqs %s answer: %w", form.Get("Action"), err)
		}
	}
	return nil
}

// Push implements queue.Backend: SendMessage.
func (q *SQS) Push(ctx context.Context, body string) error {
	if err := q.call(ctx, url.Values{"Action": {"SendMessage"}, "MessageBody": {body}}, nil); err != nil {
		return err
	}
	q.mu.Lock()
	q.pushed++
	q.mu.Unlock()
	return nil
}

// Depth implements queue.Backend: the messages waiting, in flight and
// delayed, as GetQueueAttributes had them, plus what this container
// queued since (a burst within the second counts). The first read, a
// read after the last one failed, and a read when the last depth is at
// or above Cap, is made on the caller's path; otherwise a read older
// than a second is answered at once and read again beside the send (one
// read at a time), so a send of a quiet container does not wait for a
// second SQS call before its SendMessage. A container that was idle
// admits its first message on the depth it read last, plus its own
// sends: it may admit that one message over the cap (the cap is soft:
// see docs/delivery.md), but it refuses none on an old read.
func (q *SQS) Depth(ctx context.Context) (int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	fresh := time.Since(q.depthRead) < q.every
	if !fresh && !q.depthRead.IsZero() && q.depthErr == nil && (q.Cap <= 0 || q.depth+q.pushed < q.Cap) {
		if !q.refreshing {
			q.refreshing = true
			go q.refresh(context.WithoutCancel(ctx), q.pushed)
		}
		fresh = true
	}
	if !fresh {
		n, err := q.readDepth(ctx)
		q.read(n, err, q.pushed)
	}
	return q.depth + q.pushed, q.depthErr
}

// refresh reads the depth off the send's path; pushed is what this
// container had queued when it began (the read counts those).
func (q *SQS) refresh(ctx context.Context, pushed int64) {
	n, err := q.readDepth(ctx)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refreshing = false
	if err != nil && q.failures+1 < refreshFailures {
		q.failures++
		q.depthRead = time.Now() // the last depth stands; again in a second
		return
	}
	q.read(n, err, pushed)
}

// read records a read of n (or its failure) that began when this
// container had queued pushed messages. Under q.mu.
func (q *SQS) read(n int64, err error, pushed int64) {
	q.depthRead = time.Now()
	q.depthErr = err
	if err != nil {
		q.failures++
		q.depth, q.pushed = 0, 0
		return
	}
	q.failures = 0
	q.depth = n
	q.pushed -= min(pushed, q.pushed) // those queued while it read may be in n too: counted twice, towards refusing
}

// readDepth is one GetQueueAttributes call.
func (q *SQS) readDepth(ctx context.Context) (int64, error) {
	var out struct {
		Attributes []struct{ Name, Value string } `xml:"GetQueueAttributesResult>Attribute"`
	}
	if err := q.call(ctx, url.Values{"Action": {"GetQueueAttributes"},
		"AttributeName.1": {"ApproximateNumberOfMessages"}, "AttributeName.2": {"ApproximateNumberOfMessagesNotVisible"},
		"AttributeName.3": {"ApproximateNumberOfMessagesDelayed"}}, &out); err != nil {
		return 0, err
	}
	var depth int64
	for _, a := range out.Attributes {
		n, _ := strconv.ParseInt(a.Value, 10, 64)
		depth += n
	}
	return depth, nil
}

// Postpone makes a received message visible again after d
// (ChangeMessageVisibility).
func (q *SQS) Postpone(ctx context.Context, receiptHandle string, d time.Duration) error {
	return q.call(ctx, url.Values{"Action": {"ChangeMessageVisibility"}, "ReceiptHandle": {receiptHandle},
		"VisibilityTimeout": {strconv.Itoa(int(d / time.Second))}}, nil)
}
