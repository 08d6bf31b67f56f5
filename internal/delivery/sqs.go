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
// (read at most once a second per container), and ChangeMessageVisibility
// for the consumer's backoff. The event source mapping receives and
// deletes.
type SQS struct {
	*awsjson.Signed
	url string

	mu        sync.Mutex
	depth     int64
	depthErr  error
	depthRead time.Time
	pushed    int64 // by this container since the depth was read
}

// NewSQS returns the queue at queueURL, in cfg's region.
func NewSQS(cfg aws.Config, queueURL string) *SQS {
	return &SQS{Signed: awsjson.NewSigned(cfg, "sqs", 5*time.Second), url: queueURL}
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
// delayed, as GetQueueAttributes had them at most a second ago, plus what
// this container queued since (a burst within the second counts).
func (q *SQS) Depth(ctx context.Context) (int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if time.Since(q.depthRead) < time.Second {
		return q.depth + q.pushed, q.depthErr
	}
	q.pushed = 0
	var out struct {
		Attributes []struct{ Name, Value string } `xml:"GetQueueAttributesResult>Attribute"`
	}
	q.depth, q.depthErr = 0, q.call(ctx, url.Values{"Action": {"GetQueueAttributes"},
		"AttributeName.1": {"ApproximateNumberOfMessages"}, "AttributeName.2": {"ApproximateNumberOfMessagesNotVisible"},
		"AttributeName.3": {"ApproximateNumberOfMessagesDelayed"}}, &out)
	for _, a := range out.Attributes {
		n, _ := strconv.ParseInt(a.Value, 10, 64)
		q.depth += n
	}
	q.depthRead = time.Now()
	return q.depth, q.depthErr
}

// Postpone makes a received message visible again after d
// (ChangeMessageVisibility).
func (q *SQS) Postpone(ctx context.Context, receiptHandle string, d time.Duration) error {
	return q.call(ctx, url.Values{"Action": {"ChangeMessageVisibility"}, "ReceiptHandle": {receiptHandle},
		"VisibilityTimeout": {strconv.Itoa(int(d / time.Second))}}, nil)
}
