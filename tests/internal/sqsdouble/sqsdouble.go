// Package sqsdouble runs goaws, an SQS-compatible server, in the test's
// process, and plays the Lambda event source mapping in front of a
// deliver function: what the delivery queue's tests (tests/e2e,
// tests/lambda) share.
package sqsdouble

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	goaws "github.com/Admiral-Piett/goaws/app"
	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/router"
	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/sirupsen/logrus"
)

// server is goaws in this process: its queues are global, so tests name
// theirs apart.
var server = sync.OnceValue(func() string {
	logrus.SetOutput(io.Discard)
	srv := httptest.NewServer(router.New())
	u, _ := url.Parse(srv.URL)
	goaws.CurrentEnvironment = goaws.Environment{Host: u.Hostname(), Port: u.Port(), AccountID: "100010001000",
		QueueAttributeDefaults: goaws.EnvQueueAttributes{VisibilityTimeout: 30, MaximumMessageSize: 262144}}
	go gosqs.PeriodicTasks(50*time.Millisecond, make(chan struct{}))
	return srv.URL
})

// Call is one query-protocol call (to the queue at queueURL, or to the
// server when it is "").
func Call(t testing.TB, queueURL string, form url.Values, out any) {
	t.Helper()
	form.Set("Version", "2012-11-05")
	target := server()
	if queueURL != "" {
		form.Set("QueueUrl", queueURL)
		target = queueURL
	}
	resp, err := http.PostForm(target, form)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Errorf("sqs %s: %d %s", form.Get("Action"), resp.StatusCode, raw)
		return
	}
	if out != nil {
		if err := xml.Unmarshal(raw, out); err != nil {
			t.Errorf("sqs %s: %v", form.Get("Action"), err)
		}
	}
}

// Queue creates a queue and its dead-letter queue as the stack does
// (name-dlq, maxReceiveCount maxReceives) and returns their URLs.
func Queue(t testing.TB, name string, maxReceives int) (queueURL, dlqURL string) {
	t.Helper()
	var out struct {
		URL string `xml:"CreateQueueResult>QueueUrl"`
	}
	Call(t, "", url.Values{"Action": {"CreateQueue"}, "QueueName": {name + "-dlq"}}, &out)
	dlqURL = out.URL
	Call(t, "", url.Values{"Action": {"CreateQueue"}, "QueueName": {name},
		"Attribute.1.Name": {"RedrivePolicy"}, "Attribute.1.Value": {`{"maxReceiveCount":"` + fmt.Sprint(maxReceives) + `","deadLetterTargetArn":"arn:aws:sqs:us-east-1:100010001000:` + name + `-dlq"}`},
		"Attribute.2.Name": {"VisibilityTimeout"}, "Attribute.2.Value": {"30"}}, &out)
	return out.URL, dlqURL
}

// Message is a received message.
type Message struct {
	MessageID     string `xml:"MessageId"`
	ReceiptHandle string `xml:"ReceiptHandle"`
	Body          string `xml:"Body"`
	Attributes    []struct {
		Name  string `xml:"Name"`
		Value string `xml:"Value"`
	} `xml:"Attribute"`
}

// Receive receives up to n messages, waiting up to wait for one.
func Receive(t testing.TB, queueURL string, n int, wait time.Duration) []Message {
	var out struct {
		Messages []Message `xml:"ReceiveMessageResult>Message"`
	}
	Call(t, queueURL, url.Values{"Action": {"ReceiveMessage"}, "MaxNumberOfMessages": {fmt.Sprint(n)},
		"WaitTimeSeconds": {fmt.Sprint(int(wait / time.Second))}, "AttributeName.1": {"All"}}, &out)
	return out.Messages
}

// Depth is the messages waiting and in flight.
func Depth(t testing.TB, queueURL string) int {
	var out struct {
		Attributes []struct{ Name, Value string } `xml:"GetQueueAttributesResult>Attribute"`
	}
	Call(t, queueURL, url.Values{"Action": {"GetQueueAttributes"}, "AttributeName.1": {"All"}}, &out)
	n := 0
	for _, a := range out.Attributes {
		if a.Name == "ApproximateNumberOfMessages" || a.Name == "ApproximateNumberOfMessagesNotVisible" {
			var v int
			fmt.Sscan(a.Value, &v)
			n += v
		}
	}
	return n
}

// Deliver is a deliver function's handler.
type Deliver = func(context.Context, json.RawMessage) (json.RawMessage, error)

// EventSource plays the Lambda event source mapping: pollers receive up
// to 10 messages, invoke the deliver function with them as an SQS event,
// and delete each message it does not report as a batch item failure.
// With Redeliver, each batch's event is handed over twice (SQS's at least
// once).
type EventSource struct {
	t         testing.TB
	queueURL  string
	deliver   Deliver
	redeliver bool
	stop      chan struct{}
	wg        sync.WaitGroup
	mu        sync.Mutex
	receives  map[string]int // by message id: goaws 0.4.4 answers ApproximateReceiveCount 1 on every receive
}

// Start starts pollers pollers on queueURL; t's cleanup stops them.
func Start(t testing.TB, queueURL string, deliver Deliver, pollers int, redeliver bool) *EventSource {
	e := &EventSource{t: t, queueURL: queueURL, deliver: deliver, redeliver: redeliver, stop: make(chan struct{}), receives: map[string]int{}}
	for range pollers {
		e.wg.Go(e.poll)
	}
	t.Cleanup(e.Close)
	return e
}

// Close stops the pollers once their batch is done.
func (e *EventSource) Close() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.wg.Wait()
}

// Event is the SQS event of msgs, their receive counts counted here.
func (e *EventSource) Event(msgs []Message) json.RawMessage {
	var ev lambdaevents.SQSEvent
	for _, m := range msgs {
		attrs := map[string]string{}
		for _, a := range m.Attributes {
			attrs[a.Name] = a.Value
		}
		e.mu.Lock()
		e.receives[m.MessageID]++
		attrs["ApproximateReceiveCount"] = fmt.Sprint(e.receives[m.MessageID])
		e.mu.Unlock()
		ev.Records = append(ev.Records, lambdaevents.SQSMessage{MessageId: m.MessageID, ReceiptHandle: m.ReceiptHandle,
			Body: m.Body, Attributes: attrs, EventSource: "aws:sqs"})
	}
	raw, _ := json.Marshal(ev)
	return raw
}

func (e *EventSource) poll() {
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		msgs := Receive(e.t, e.queueURL, 10, time.Second)
		if len(msgs) == 0 {
			continue
		}
		raw := e.Event(msgs)
		answer, err := e.deliver(context.Background(), raw)
		if e.redeliver {
			answer, err = e.deliver(context.Background(), raw)
		}
		if err != nil {
			e.t.Errorf("deliver: %v", err)
			continue
		}
		var res lambdaevents.SQSEventResponse
		if err := json.Unmarshal(answer, &res); err != nil {
			e.t.Errorf("deliver answered %s: %v", answer, err)
			continue
		}
		for _, m := range msgs {
			if !slices.ContainsFunc(res.BatchItemFailures, func(f lambdaevents.SQSBatchItemFailure) bool { return f.ItemIdentifier == m.MessageID }) {
				Call(e.t, e.queueURL, url.Values{"Action": {"DeleteMessage"}, "ReceiptHandle": {m.ReceiptHandle}}, nil)
			}
		}
	}
}
