package delivery

import (
	"context"
	"encoding/xml"
	"errors"
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
// (read at most once a second per container, beside the send once known:
// see Depth), and ChangeMessageVisibility for the consumer's backoff. The
// event source mapping receives and deletes.
type SQS struct {
	*awsjson.Signed
	url string
	// every is how long a depth read is fresh, from when it began (a
	// second).
	every time.Duration
	// patience is how long a read beside the sends may take before the
	// sends read on their path again (a tenth of a second): what a
	// container admits on its last depth meanwhile is bounded by it.
	patience time.Duration
	// Cap is the depth at which the queue refuses sends
	// (DELIVERY_QUEUE_MAX_DEPTH): a last depth at or above it is read
	// again on the send's path, so a send is never refused on an old
	// read. 0: none.
	Cap int64

	mu       sync.Mutex
	depth    int64
	depthErr error
	readFrom time.Time // when the read in force began: fresh for every after it; a read begun before it never replaces it
	known    bool      // the read in force succeeded
	pushed   int64     // by this container since the read in force
	beside   time.Time // when the read beside the sends began; zero: none under way
}

// NewSQS returns the queue at queueURL, in cfg's region.
func NewSQS(cfg aws.Config, queueURL string) *SQS {
	return &SQS{Signed: awsjson.NewSigned(cfg, "sqs", 5*time.Second), url: queueURL, every: time.Second, patience: 100 * time.Millisecond}
}

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
// queued since (a burst within the second counts). A read is fresh for a
// second from when it began. After that, when the last read succeeded
// and is below Cap, it is answered at once and read again beside the
// send (one such read at a time), so a send of a quiet container does not
// wait for a second SQS call before its SendMessage. Otherwise the depth
// is read on the caller's path: the first read of a container, after a
// read that failed (which is reported at once: the cap is not applied,
// and logged), at or above Cap (a send is never refused on a read more
// than a second old), and while the read beside the sends has taken over
// a tenth of a second (SQS slow: what the container admits on its last
// depth is bounded by that). A read begun before the one in force never
// replaces it. So a container that was idle may admit, over the cap, the
// sends it serves in a tenth of a second (the cap is soft: see
// docs/delivery.md); an SQS that hangs costs every send after a second
// the client's timeout (5 s), as before.
func (q *SQS) Depth(ctx context.Context) (int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	switch {
	case now.Sub(q.readFrom) < q.every:
	case q.known && (q.Cap <= 0 || q.depth+q.pushed < q.Cap) && (q.beside.IsZero() || now.Sub(q.beside) < q.patience):
		if q.beside.IsZero() {
			q.beside = now
			go q.readBeside(context.WithoutCancel(ctx), now)
		}
	default:
		n, err := q.readDepth(ctx)
		q.land(now, n, err)
	}
	return q.depth + q.pushed, q.depthErr
}

// readBeside reads the depth off the send's path, begun at began.
func (q *SQS) readBeside(ctx context.Context, began time.Time) {
	n, err := q.readDepth(ctx)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.beside.Equal(began) {
		q.beside = time.Time{}
	}
	q.land(began, n, err)
}

// land records a read begun at began: n, or its failure. Under q.mu.
func (q *SQS) land(began time.Time, n int64, err error) {
	if began.Before(q.readFrom) {
		return // a later read is in force
	}
	q.readFrom = began // fresh from when it began: a read that answered late (SQS slow, a container frozen while it read) is as old as what it counted
	q.depthErr, q.known = err, err == nil
	q.depth, q.pushed = n, 0
	// (what this container queued while a read beside the sends was under
	// way is taken as counted in n: never counted twice towards refusing)
}

// readDepth is one GetQueueAttributes call: the sum of the three counts
// asked for, each once and a whole number in [0, 2^40) (SQS's are far
// below), the messages waiting among them: any other answer is an error,
// never a depth that refuses every send or none.
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
	seen := map[string]bool{}
	for _, a := range out.Attributes {
		switch a.Name {
		case "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed":
		default:
			continue // not asked for
		}
		n, err := strconv.ParseInt(a.Value, 10, 64)
		if err != nil || n < 0 || n >= 1<<40 || seen[a.Name] {
			return 0, fmt.Errorf("sqs GetQueueAttributes: %s is %q, not a count", a.Name, a.Value)
		}
		seen[a.Name] = true
		depth += n
	}
	if !seen["ApproximateNumberOfMessages"] {
		return 0, errors.New("sqs GetQueueAttributes: no count of the messages waiting in the answer")
	}
	return depth, nil
}

// Postpone makes a received message visible again after d
// (ChangeMessageVisibility).
func (q *SQS) Postpone(ctx context.Context, receiptHandle string, d time.Duration) error {
	return q.call(ctx, url.Values{"Action": {"ChangeMessageVisibility"}, "ReceiptHandle": {receiptHandle},
		"VisibilityTimeout": {strconv.Itoa(int(d / time.Second))}}, nil)
}
