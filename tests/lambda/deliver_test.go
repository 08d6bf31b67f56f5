package lambda

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/apigw"
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
	"github.com/otpguard/otpguard/tests/internal/sqsdouble"
)

// sealedBox keeps what a queue pushes.
type sealedBox struct{ bodies []string }

func (b *sealedBox) Push(_ context.Context, body string) error {
	b.bodies = append(b.bodies, body)
	return nil
}
func (b *sealedBox) Depth(context.Context) (int64, error) { return 0, nil }

// deliverBootstrapDelivers: the deliver function's built bootstrap, under
// the emulator with the template's environment, takes an SQS event (a
// message sealed with the stack's hash secret, as the send function
// queues it), sends the SMS through SNS, answers no batch item failure,
// and sends nothing when the same event comes again (SQS's redelivery);
// a body it cannot open is dropped, not retried forever.
func deliverBootstrapDelivers(t *testing.T, e *emulated, aws *awsfake.Server, rb lambdaRedis) {
	t.Helper()
	box := &sealedBox{}
	q, err := queue.New(queue.Host{Redis: rb.admin, Secret: []byte(strings.Repeat("h", 48)), Void: func(context.Context, string) error { return nil }}, box, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	msg := message.Message{Channel: message.SMS, To: "+447911123456", Purpose: "login", Code: "246810", Text: "Your code is 246810", TTL: time.Minute}
	if err := q.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	event := func(bodies ...string) []byte {
		var ev lambdaevents.SQSEvent
		for i, b := range bodies {
			ev.Records = append(ev.Records, lambdaevents.SQSMessage{MessageId: "m" + string(rune('0'+i)), ReceiptHandle: "rh", Body: b,
				Attributes: map[string]string{"ApproximateReceiveCount": "1"}, EventSource: "aws:sqs"})
		}
		raw, _ := json.Marshal(ev)
		return raw
	}
	before := len(aws.SMS())
	for _, round := range []string{"first", "redelivered"} {
		body, isErr := e.invoke(t, "deliver-"+round, event(box.bodies[0], "not a sealed job"))
		if isErr {
			t.Fatalf("%s: the function failed: %s\n%s", round, body, e.out.String())
		}
		var res lambdaevents.SQSEventResponse
		if err := json.Unmarshal(body, &res); err != nil || len(res.BatchItemFailures) != 0 {
			t.Fatalf("%s: answered %s, want no batch item failure", round, body)
		}
	}
	sms := aws.SMS()[before:]
	if len(sms) != 1 || !strings.Contains(sms[0].Message, "246810") || sms[0].PhoneNumber != msg.To {
		t.Fatalf("sent %+v, want the one SMS once", sms)
	}
	if strings.Contains(e.out.String(), "246810") || strings.Contains(e.out.String(), "7911123456") {
		t.Error("the code or the number in the function's log")
	}
}

// TestTheCustomSendersQueueToo: with DeliveryMode queue the Cognito
// custom SMS sender's built bootstrap answers Cognito as soon as the
// message is queued (goaws), and the deliver function's built bootstrap,
// handed the queue's messages as SQS events, sends each code once: the
// resent code only (the newest wins), and a redelivered batch sends
// nothing more. A public send to the same number and purpose, queued
// meanwhile, does not supersede the Cognito code (their codes live in
// different stores): both are delivered.
func TestTheCustomSendersQueueToo(t *testing.T) {
	bin := t.TempDir()
	sender, deliverer := buildBootstrap(t, bin, "cognitosend"), buildBootstrap(t, bin, "deliver")
	rb := lambdaBackends(t)[1] // the Serverless double: the stack's cache user
	aws := newTriggerAWS(rb)
	defer aws.Close()
	queueURL, _ := sqsdouble.Queue(t, "cognito-delivery", 5)
	env := triggerEnv(aws, rb)
	env["DELIVERY_MODE"], env["DELIVERY_QUEUE_URL"], env["DELIVERY_MAX_RECEIVES"] = "queue", queueURL, "5"
	send, _, _ := startTrigger(t, sender, "cognitosend", env)
	deliver, _, deliverLogs := startTrigger(t, deliverer, "deliver", env)

	phone := map[string]string{"sub": "5f1c2d3e", "phone_number": "+447911123456", "phone_number_verified": "false"}
	codes := encrypt(t, aws, sampleKeyARN, "forbid", "314159", "271828")
	for i, c := range codes {
		ev := senderEvent("CustomSMSSender", "SignUp", c, phone)
		t0 := time.Now()
		out := send.invokeRaw(t, fmt.Sprintf("sms-%d", i), ev)
		if out.isErr || !bytes.Equal(out.body, ev) {
			t.Fatalf("send %d: the trigger answered %s (err %v), want the event back", i, out.body, out.isErr)
		}
		t.Logf("custom sender %d answered in %s", i, time.Since(t0).Round(time.Millisecond))
	}
	// the public send function of the same stack (a config of its own: the
	// Cognito one's account rule asks every send for an account)
	aws.SetParameter("/otpguard/public-config", "otp: {ttl: 5m}\nstore: {timeout: 3s}\nrules:\n  - {name: sms-per-destination, action: otp.send, key: [destination], limit: 3, window: 1h}\n")
	public := apigw.Handler(lambdaapp.Start(context.Background(), lambdaapp.Send, lambdaapp.Parts{Senders: delivery.Senders},
		func(k string) string {
			if k == "GUARD_CONFIG_PARAM" {
				return "/otpguard/public-config"
			}
			return env[k]
		}, &testutil.Buffer{}, &testutil.Buffer{}))
	if r := apiCall(t, public, "POST", "/v1/otp/send", `{"channel":"sms","to":"+447911123456","purpose":"signup"}`, "198.51.100.20", false); r.StatusCode != 202 {
		t.Fatalf("a public send: %d %s", r.StatusCode, r.Body)
	}
	if n := len(aws.SMS()); n != 0 {
		t.Fatalf("%d SMS sent in the request, want them queued", n)
	}
	invocations := 0
	es := sqsdouble.Start(t, queueURL, func(_ context.Context, ev json.RawMessage) (json.RawMessage, error) {
		invocations++
		out := deliver.invokeRaw(t, fmt.Sprintf("deliver-%d", invocations), ev)
		if out.isErr {
			return nil, fmt.Errorf("deliver: %s", out.body)
		}
		return out.body, nil
	}, 1, true)
	for deadline := time.Now().Add(20 * time.Second); sqsdouble.Depth(t, queueURL) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the queue does not drain:\n%s", deliverLogs.String())
		}
	}
	es.Close()
	var cognito, others int
	for _, m := range aws.SMS() {
		switch {
		case strings.Contains(m.Message, "271828"):
			cognito++
		case strings.Contains(m.Message, "314159"):
			t.Errorf("the superseded Cognito code was delivered")
		default:
			others++
		}
	}
	if cognito != 1 || others != 1 {
		t.Fatalf("sent %+v, want the resent Cognito code once and the public send's code once", aws.SMS())
	}
}
