package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/delivery/queue"
)

// sqsEvent is the part of an SQS event source mapping's event the
// consumer reads.
type sqsEvent struct {
	Records []struct {
		MessageID     string            `json:"messageId"`
		ReceiptHandle string            `json:"receiptHandle"`
		Body          string            `json:"body"`
		Attributes    map[string]string `json:"attributes"`
	} `json:"Records"`
}

type itemFailure struct {
	ItemIdentifier string `json:"itemIdentifier"`
}

// Consumer is the deliver function's handler (lambdaapp.Parts.Trigger):
// it delivers each message of an SQS batch at once with the API's direct
// senders (paced, so concurrent messages wait their turns), postpones
// those to retry by their backoff, and answers the ones not delivered as
// batch item failures (ReportBatchItemFailures). A dead message (failed
// on its DELIVERY_MAX_RECEIVES-th receive) is made visible at once, for
// SQS to move it to the dead-letter queue.
func Consumer(getenv func(string) string, cfg aws.Config, rdb redis.UniversalClient, server func() *api.Server, log *slog.Logger) (func(context.Context, json.RawMessage) (json.RawMessage, error), error) {
	var errs []error
	maxReceives := positive(getenv, "DELIVERY_MAX_RECEIVES", 5, &errs)
	url := getenv("DELIVERY_QUEUE_URL")
	if url == "" {
		errs = append(errs, fmt.Errorf("DELIVERY_QUEUE_URL: required"))
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	sqs := NewSQS(cfg, url)
	var once sync.Once
	var d *queue.Deliverer
	var derr error
	deliverer := func() (*queue.Deliverer, error) {
		once.Do(func() {
			d, derr = queue.NewDeliverer(queue.DeliverOptions{
				Redis: rdb, SealKey: server().Guard.Derive(queue.SealLabel), MaxReceives: int(maxReceives), Log: log,
				Sender: func() message.Sender { return server().Sender },
				Void: func(ctx context.Context, receipt string) error {
					return server().Guard.SettleReceipt(ctx, receipt, guard.Void)
				},
			})
		})
		return d, derr
	}
	c := &consumer{sqs: sqs, deliverer: deliverer, log: log}
	return c.handle, nil
}

// consumer answers the deliver function's SQS events.
type consumer struct {
	sqs       *SQS
	deliverer func() (*queue.Deliverer, error)
	log       *slog.Logger
}

// handle delivers one batch's messages at once and answers those not
// delivered as batch item failures.
func (c *consumer) handle(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var ev sqsEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("delivery: not an SQS event: %w", err)
	}
	d, err := c.deliverer()
	if err != nil {
		return nil, err
	}
	failed := make([]bool, len(ev.Records))
	counts := map[queue.Outcome]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, r := range ev.Records {
		wg.Go(func() {
			out := c.deliver(ctx, d, r.Body, r.ReceiptHandle, r.Attributes["ApproximateReceiveCount"])
			failed[i] = out == queue.Retry || out == queue.Dead
			mu.Lock()
			counts[out]++
			mu.Unlock()
		})
	}
	wg.Wait()
	out := struct {
		Failures []itemFailure `json:"batchItemFailures"`
	}{Failures: []itemFailure{}}
	for i, r := range ev.Records {
		if failed[i] {
			out.Failures = append(out.Failures, itemFailure{r.MessageID})
		}
	}
	attrs := []any{"messages", len(ev.Records)}
	for o, n := range counts {
		attrs = append(attrs, string(o), n)
	}
	c.log.InfoContext(ctx, "delivery batch", attrs...)
	return json.Marshal(out)
}

// deliver attempts one message; one to retry is postponed by its
// backoff, a dead one made visible at once (for SQS to move it to the
// dead-letter queue).
func (c *consumer) deliver(ctx context.Context, d *queue.Deliverer, body, receiptHandle, receiveCount string) queue.Outcome {
	receive, _ := strconv.Atoi(receiveCount)
	out, wait := d.Deliver(ctx, body, max(receive, 1))
	if out == queue.Dead {
		wait = 0
	}
	if out == queue.Retry || out == queue.Dead {
		if err := c.sqs.Postpone(context.WithoutCancel(ctx), receiptHandle, wait); err != nil {
			c.log.WarnContext(ctx, "a message to retry was not postponed; it returns after the queue's visibility timeout", "err", err)
		}
	}
	return out
}
