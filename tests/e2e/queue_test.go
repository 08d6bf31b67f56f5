package e2e

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goaws "github.com/Admiral-Piett/goaws/app"
	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/router"
	lambdaevents "github.com/aws/aws-lambda-go/events"
	"github.com/sirupsen/logrus"

	"github.com/otpguard/otpguard/internal/apigw"
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// sqsServer is goaws, an SQS-compatible server, in this process: its
// queues are global, so the queue tests name theirs apart.
var sqsServer = sync.OnceValue(func() string {
	logrus.SetOutput(io.Discard)
	srv := httptest.NewServer(router.New())
	u, _ := url.Parse(srv.URL)
	goaws.CurrentEnvironment = goaws.Environment{Host: u.Hostname(), Port: u.Port(), AccountID: "100010001000",
		QueueAttributeDefaults: goaws.EnvQueueAttributes{VisibilityTimeout: 30, MaximumMessageSize: 262144}}
	go gosqs.PeriodicTasks(50*time.Millisecond, make(chan struct{}))
	return srv.URL
})

// sqsCall is one query-protocol call to goaws.
func sqsCall(t *testing.T, queueURL string, form url.Values, out any) {
	t.Helper()
	form.Set("Version", "2012-11-05")
	if queueURL != "" {
		form.Set("QueueUrl", queueURL)
	}
	target := sqsServer()
	if queueURL != "" {
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

// deliveryQueue creates a queue and its dead-letter queue as the stack
// does (maxReceiveCount 5) and returns their URLs.
func deliveryQueue(t *testing.T, name string, maxReceives int) (queueURL, dlqURL string) {
	t.Helper()
	var out struct {
		URL string `xml:"CreateQueueResult>QueueUrl"`
	}
	sqsCall(t, "", url.Values{"Action": {"CreateQueue"}, "QueueName": {name + "-dlq"}}, &out)
	dlqURL = out.URL
	sqsCall(t, "", url.Values{"Action": {"CreateQueue"}, "QueueName": {name},
		"Attribute.1.Name": {"RedrivePolicy"}, "Attribute.1.Value": {`{"maxReceiveCount":"` + fmt.Sprint(maxReceives) + `","deadLetterTargetArn":"arn:aws:sqs:us-east-1:100010001000:` + name + `-dlq"}`},
		"Attribute.2.Name": {"VisibilityTimeout"}, "Attribute.2.Value": {"30"}}, &out)
	return out.URL, dlqURL
}

type sqsMessage struct {
	MessageID     string `xml:"MessageId"`
	ReceiptHandle string `xml:"ReceiptHandle"`
	Body          string `xml:"Body"`
	Attributes    []struct {
		Name  string `xml:"Name"`
		Value string `xml:"Value"`
	} `xml:"Attribute"`
}

func receive(t *testing.T, queueURL string, n int, wait time.Duration) []sqsMessage {
	var out struct {
		Messages []sqsMessage `xml:"ReceiveMessageResult>Message"`
	}
	sqsCall(t, queueURL, url.Values{"Action": {"ReceiveMessage"}, "MaxNumberOfMessages": {fmt.Sprint(n)},
		"WaitTimeSeconds": {fmt.Sprint(int(wait / time.Second))}, "AttributeName.1": {"All"}}, &out)
	return out.Messages
}

// eventSource plays the Lambda event source mapping: pollers receive up
// to 10 messages, invoke the deliver function with them as an SQS event,
// and delete each message not reported as a batch item failure.
// redeliver, when set, sends a batch's event twice (SQS's at least once).
type eventSource struct {
	t         *testing.T
	queueURL  string
	deliver   func(context.Context, json.RawMessage) (json.RawMessage, error)
	redeliver bool
	stop      chan struct{}
	wg        sync.WaitGroup
	invoked   atomic.Int64
	mu        sync.Mutex
	receives  map[string]int // by message id: goaws 0.4.4 answers ApproximateReceiveCount 1 on every receive
}

func startEventSource(t *testing.T, queueURL string, deliver func(context.Context, json.RawMessage) (json.RawMessage, error), pollers int, redeliver bool) *eventSource {
	e := &eventSource{t: t, queueURL: queueURL, deliver: deliver, redeliver: redeliver, stop: make(chan struct{}), receives: map[string]int{}}
	for range pollers {
		e.wg.Go(e.poll)
	}
	t.Cleanup(e.Close)
	return e
}

func (e *eventSource) Close() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.wg.Wait()
}

func (e *eventSource) poll() {
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		msgs := receive(e.t, e.queueURL, 10, time.Second)
		if len(msgs) == 0 {
			continue
		}
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
		answer, err := e.deliver(context.Background(), raw)
		e.invoked.Add(1)
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
				sqsCall(e.t, e.queueURL, url.Values{"Action": {"DeleteMessage"}, "ReceiptHandle": {m.ReceiptHandle}}, nil)
			}
		}
	}
}

func queueDepth(t *testing.T, queueURL string) int {
	var out struct {
		Attributes []struct{ Name, Value string } `xml:"GetQueueAttributesResult>Attribute"`
	}
	sqsCall(t, queueURL, url.Values{"Action": {"GetQueueAttributes"}, "AttributeName.1": {"All"}}, &out)
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

// queueStack is the send, verify and deliver functions of a stack in
// DeliveryMode queue, on the Serverless double as the stack's cache user,
// AWS's fake endpoint (SNS at smsPerSecond) and goaws.
type queueStack struct {
	aws              *awsfake.Server
	queueURL, dlqURL string
	send, verify     func(context.Context, lambdaevents.APIGatewayV2HTTPRequest) (lambdaevents.APIGatewayV2HTTPResponse, error)
	deliver          func(context.Context, json.RawMessage) (json.RawMessage, error)
	logs             *testutil.Buffer
}

func newQueueStack(t *testing.T, name, config string, smsPerSecond, maxReceives int, extraEnv ...map[string]string) *queueStack {
	t.Helper()
	s := &queueStack{aws: awsfake.New(), logs: &testutil.Buffer{}}
	t.Cleanup(s.aws.Close)
	s.aws.SetSecret("otpguard/hash", strings.Repeat("h", 48))
	s.aws.SetSecret("otpguard/signing", strings.Repeat("s", 64))
	s.aws.SetParameter("/otpguard/config", config)
	s.aws.Limit("Publish", smsPerSecond) // the provider takes this many a second, and throttles the rest
	s.queueURL, s.dlqURL = deliveryQueue(t, name, maxReceives)
	b := backends()[2]
	env := map[string]string{
		"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret",
		"AWS_ENDPOINT_URL": s.aws.URL, "REDIS_URL": b.redisURL, "GUARD_CONFIG_PARAM": "/otpguard/config",
		"GUARD_HASH_SECRET_ID": "otpguard/hash", "GUARD_SIGNING_SECRET_ID": "otpguard/signing", "SES_FROM": "no-reply@otpguard.example",
		"SMS_PER_SECOND": fmt.Sprint(smsPerSecond), "DELIVERY_MODE": "queue", "DELIVERY_QUEUE_URL": s.queueURL,
		"DELIVERY_MAX_RECEIVES": fmt.Sprint(maxReceives), "DELIVERY_MAX_WAIT": "20s",
	}
	for _, extra := range extraEnv {
		for k, v := range extra {
			env[k] = v
		}
	}
	getenv := func(k string) string { return env[k] }
	parts := lambdaapp.Parts{Senders: delivery.Senders, Trigger: delivery.Consumer}
	s.send = apigw.Handler(lambdaapp.Start(context.Background(), lambdaapp.Send, parts, getenv, &testutil.Buffer{}, s.logs))
	s.verify = apigw.Handler(lambdaapp.Start(context.Background(), lambdaapp.Verify, parts, getenv, &testutil.Buffer{}, s.logs))
	s.deliver = lambdaapp.TriggerHandler(lambdaapp.Start(context.Background(), lambdaapp.Deliver, parts, getenv, &testutil.Buffer{}, s.logs))
	return s
}

func (s *queueStack) call(t *testing.T, h func(context.Context, lambdaevents.APIGatewayV2HTTPRequest) (lambdaevents.APIGatewayV2HTTPResponse, error),
	path, body, ip string) lambdaevents.APIGatewayV2HTTPResponse {
	e := lambdaevents.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "POST " + path, RawPath: path, Body: body,
		Headers: map[string]string{"content-type": "application/json"}}
	e.RequestContext.HTTP = lambdaevents.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: path, SourceIP: ip, Protocol: "HTTP/1.1"}
	e.RequestContext.RequestID = fmt.Sprintf("req-%d", time.Now().UnixNano())
	resp, err := h(context.Background(), e)
	if err != nil {
		t.Error(err)
	}
	return resp
}

func (s *queueStack) sendSMS(t *testing.T, to, ip string) lambdaevents.APIGatewayV2HTTPResponse {
	return s.call(t, s.send, "/v1/otp/send", `{"channel":"sms","to":"`+to+`","purpose":"login"}`, ip)
}

var smsCode = regexp.MustCompile(`\b(\d{6})\b`)

// delivered is each number's delivered codes, in order.
func (s *queueStack) delivered() map[string][]string {
	out := map[string][]string{}
	for _, m := range s.aws.SMS() {
		out[m.PhoneNumber] = append(out[m.PhoneNumber], smsCode.FindString(m.Message))
	}
	return out
}

const queueConfig = `otp: {ttl: 5m}
store: {timeout: 10s}
rules:
  - {name: sms-per-destination, action: otp.send, key: [destination], limit: 5, window: 1h}
`

// TestABurstAboveTheProvidersRateIsQueuedNotRefused: 500 sends in a burst
// against a provider that takes 20 a second: every one answered 202 at
// once, every code delivered exactly once within 30 s, at the provider's
// pace; a resend during the backlog delivers only the newer code (the one
// that verifies).
func TestABurstAboveTheProvidersRateIsQueuedNotRefused(t *testing.T) {
	s := newQueueStack(t, "burst", queueConfig, 20, 5)
	const n, resent = 500, 10
	start := time.Now()
	startEventSource(t, s.queueURL, s.deliver, 2, false)
	latencies := make([]time.Duration, n+resent)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				to := fmt.Sprintf("+447911123%03d", i)
				if i >= n {
					to = fmt.Sprintf("+447911123%03d", i-resent) // a resend to one of the last numbers, still waiting
				}
				t0 := time.Now()
				r := s.sendSMS(t, to, fmt.Sprintf("198.51.%d.%d", i/250, i%250))
				latencies[i] = time.Since(t0)
				if r.StatusCode != 202 || !strings.Contains(r.Body, `"queued":true`) {
					t.Errorf("send %d: %d %s", i, r.StatusCode, r.Body)
				}
			}
		})
	}
	for i := range n + resent { // the last ten resend to the numbers before them, during the backlog
		work <- i
	}
	close(work)
	wg.Wait()
	burst := time.Since(start)
	slices.Sort(latencies)
	t.Logf("%d sends answered in %s: p50 %s, p99 %s, max %s", n+resent, burst.Round(time.Millisecond),
		latencies[len(latencies)/2].Round(time.Microsecond), latencies[len(latencies)*99/100].Round(time.Microsecond), latencies[len(latencies)-1].Round(time.Microsecond))
	if p99 := latencies[len(latencies)*99/100]; p99 > 100*time.Millisecond {
		t.Errorf("p99 of a queued send %s, want under 100ms", p99)
	}
	for deadline := start.Add(60 * time.Second); len(s.aws.SMS()) < n && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
	}
	took := time.Since(start)
	time.Sleep(2 * time.Second) // nothing more comes
	got := s.delivered()
	t.Logf("%d messages delivered in %s (%.1f a second); %d Publish calls", len(s.aws.SMS()), took.Round(time.Millisecond),
		float64(len(s.aws.SMS()))/took.Seconds(), s.aws.CallsOf("sns:Publish"))
	if len(got) != n {
		t.Fatalf("%d numbers got a message, want %d; logs:\n%s", len(got), n, tail(s.logs.String(), 3000))
	}
	for to, codes := range got {
		if len(codes) != 1 {
			t.Errorf("%s got %d messages, want exactly one", to, len(codes))
		}
	}
	if took > 30*time.Second {
		t.Errorf("the backlog took %s to deliver, want under 30s", took)
	}
	// the resent numbers got one code: the newer, which verifies
	for i := range resent {
		to := fmt.Sprintf("+447911123%03d", n-resent+i)
		r := s.call(t, s.verify, "/v1/otp/verify", `{"to":"`+to+`","purpose":"login","code":"`+got[to][0]+`"}`, "203.0.113.9")
		if r.StatusCode != 200 {
			t.Errorf("%s: the code delivered does not verify: %d %s", to, r.StatusCode, r.Body)
		}
	}
	if d := queueDepth(t, s.queueURL); d != 0 {
		t.Errorf("%d messages left in the queue", d)
	}
	if strings.Contains(s.logs.String(), "+447911123") {
		t.Error("a number in clear in the logs")
	}
}

// waitFor polls cond every 50ms for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// TestAQueuedCodeThatExpiredIsNotDelivered: the consumer is down longer
// than the code lives; when it comes back the message is dropped, not
// delivered late.
func TestAQueuedCodeThatExpiredIsNotDelivered(t *testing.T) {
	s := newQueueStack(t, "expiry", strings.Replace(queueConfig, "ttl: 5m", "ttl: 2s", 1), 20, 5)
	if r := s.sendSMS(t, "+447911124001", "198.51.100.1"); r.StatusCode != 202 {
		t.Fatalf("send: %d %s", r.StatusCode, r.Body)
	}
	time.Sleep(2500 * time.Millisecond)
	startEventSource(t, s.queueURL, s.deliver, 1, false)
	if !waitFor(20*time.Second, func() bool { return queueDepth(t, s.queueURL) == 0 }) {
		t.Fatal("the expired message stays in the queue")
	}
	if len(s.aws.SMS()) != 0 {
		t.Fatalf("an expired code was delivered: %d messages", len(s.aws.SMS()))
	}
	// a fresh one is delivered
	if r := s.sendSMS(t, "+447911124001", "198.51.100.1"); r.StatusCode != 202 {
		t.Fatalf("send: %d %s", r.StatusCode, r.Body)
	}
	if !waitFor(20*time.Second, func() bool { return len(s.aws.SMS()) == 1 }) {
		t.Fatal("a live code was not delivered")
	}
}

// TestAProviderThatFailsDeadLettersTheMessageAndGivesTheUnitsBack: the
// provider fails every try; on the last receive the message goes to the
// dead-letter queue and the send's unit is given back, so the user's next
// send is not refused by a limit of one (maxReceiveCount 2 here, to keep
// the backoff short).
func TestAProviderThatFailsDeadLettersTheMessageAndGivesTheUnitsBack(t *testing.T) {
	const to = "+447911124002"
	s := newQueueStack(t, "dead", strings.Replace(queueConfig, "limit: 5", "limit: 1", 1), 20, 2)
	s.aws.Fail(to, "InternalError")
	if r := s.sendSMS(t, to, "198.51.100.2"); r.StatusCode != 202 {
		t.Fatalf("send: %d %s", r.StatusCode, r.Body)
	}
	startEventSource(t, s.queueURL, s.deliver, 1, false)
	if !waitFor(30*time.Second, func() bool { return queueDepth(t, s.dlqURL) == 1 }) {
		t.Fatalf("no message in the dead-letter queue (queue %d); logs:\n%s", queueDepth(t, s.queueURL), tail(s.logs.String(), 3000))
	}
	if d := queueDepth(t, s.queueURL); d != 0 {
		t.Fatalf("%d left in the queue", d)
	}
	s.aws.Fail(to, "")
	if r := s.sendSMS(t, to, "198.51.100.2"); r.StatusCode != 202 {
		t.Fatalf("the send after the outage: %d %s (its unit was not given back); logs:\n%s", r.StatusCode, r.Body, tail(s.logs.String(), 3000))
	}
	if !waitFor(20*time.Second, func() bool { return len(s.aws.SMS()) == 1 }) {
		t.Fatal("the send after the outage was not delivered")
	}
	if r := s.sendSMS(t, to, "198.51.100.2"); r.StatusCode != 429 {
		t.Fatalf("a third send under a limit of one: %d, want 429", r.StatusCode)
	}
}

// TestARedeliveredMessageSendsOnce: every batch is handed to the deliver
// function twice, as SQS may; each number gets one message.
func TestARedeliveredMessageSendsOnce(t *testing.T) {
	s := newQueueStack(t, "redelivered", queueConfig, 20, 5)
	const n = 30
	for i := range n {
		if r := s.sendSMS(t, fmt.Sprintf("+447911125%03d", i), fmt.Sprintf("198.51.100.%d", i)); r.StatusCode != 202 {
			t.Fatalf("send: %d %s", r.StatusCode, r.Body)
		}
	}
	e := startEventSource(t, s.queueURL, s.deliver, 2, true)
	if !waitFor(30*time.Second, func() bool { return queueDepth(t, s.queueURL) == 0 }) {
		t.Fatal("the queue does not drain")
	}
	e.Close()
	for to, codes := range s.delivered() {
		if len(codes) != 1 {
			t.Errorf("%s got %d messages", to, len(codes))
		}
	}
	if len(s.delivered()) != n {
		t.Fatalf("%d numbers got a message, want %d", len(s.delivered()), n)
	}
}

// TestAFullQueueRefusesWithRetryAfterAndSpendsNothing: past
// DELIVERY_QUEUE_MAX_DEPTH a send is refused 503 with a Retry-After, and
// its units go back: the same number is served once the queue drains.
func TestAFullQueueRefusesWithRetryAfterAndSpendsNothing(t *testing.T) {
	s := newQueueStack(t, "full", strings.Replace(queueConfig, "limit: 5", "limit: 1", 1), 2, 5,
		map[string]string{"DELIVERY_QUEUE_MAX_DEPTH": "4"})
	for i := range 4 {
		if r := s.sendSMS(t, fmt.Sprintf("+447911126%03d", i), "198.51.100.3"); r.StatusCode != 202 {
			t.Fatalf("send %d: %d %s", i, r.StatusCode, r.Body)
		}
	}
	time.Sleep(1100 * time.Millisecond) // the depth is read at most once a second
	r := s.sendSMS(t, "+447911126009", "198.51.100.3")
	if r.StatusCode != 503 || r.Headers["Retry-After"] == "" || !strings.Contains(r.Body, "delivery_unavailable") {
		t.Fatalf("a send past the cap: %d %v %s, want 503 with Retry-After", r.StatusCode, r.Headers, r.Body)
	}
	t.Logf("refused: Retry-After %s", r.Headers["Retry-After"])
	startEventSource(t, s.queueURL, s.deliver, 1, false)
	if !waitFor(20*time.Second, func() bool { return len(s.aws.SMS()) == 4 }) {
		t.Fatal("the queue does not drain")
	}
	time.Sleep(1100 * time.Millisecond)
	// its unit went back: a limit of one per number still lets it through
	if r := s.sendSMS(t, "+447911126009", "198.51.100.3"); r.StatusCode != 202 {
		t.Fatalf("the refused number after the queue drained: %d %s", r.StatusCode, r.Body)
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
