package lambda

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/templates"
	"github.com/otpguard/otpguard/tests/internal/sqsdouble"
)

// BenchmarkWarm runs the send, deliver, verify and login bootstraps warm
// under AWS's Lambda Runtime Interface Emulator (b.N invocations each:
// make bench runs -benchtime=200x), each bootstrap built by its template
// function's Makefile target as `sam build` builds it, and reports what
// the emulator's REPORT line says Lambda bills of a warm invocation: its
// Duration, p50 and p99 (nearest rank), and its Billed Duration (rounded
// up to the millisecond). The emulator starts the function on its first
// invocation, which is not counted (BenchmarkInit reports that start);
// a counted one whose REPORT line carries an init fails the run. Every
// invocation is its event of events/ from a new client address and for a
// new address or user, so the rules allow it and it does its whole work,
// and the run fails unless each answered so: a send stored and mailed
// (SES, a local endpoint) or queued (202), a delivery mailed, a verify of
// a wrong code (422), a login the authenticator (Cognito, a local
// endpoint) refuses (401). Sends are not paced here (EMAIL_PER_SECOND far above the
// rate): under the stack's default of 1 a second (SES's sandbox),
// back-to-back sends each wait up to a second for their turn, and that
// wait is billed too. The machine's cores are not Lambda's (a 256 MB
// function has about a seventh of one): compare the functions with one
// another, and with your own stack's Duration metric.
//
// send-queued-idle is send-queued as a quiet stack runs it: one send every
// 1.1 s (b.N of them: make bench runs 20), SQS's calls each answered
// sqsLatency late.
//
// send-queued is the send under the stack's default DeliveryMode, queue:
// the code stored and the message queued in SQS (goaws, in this process;
// SQS's own latency is not in it), the queue's depth read at most once a
// second. deliver is the function that then sends each queued message
// (an SQS event of one message: its claim in Redis, SES, the mark), so a
// queued send bills both.
func BenchmarkWarm(b *testing.B) {
	st := newBenchStack(b, "otp: {ttl: 5m}\nnetwork: {trustedProxies: [0.0.0.0/0]}\n")
	bin := b.TempDir()
	rie := buildRIE(b, bin)
	queueURL, _ := sqsdouble.Queue(b, fmt.Sprint("warm-", time.Now().UnixNano()), 5)
	queued := []string{"DELIVERY_MODE=queue", "DELIVERY_QUEUE_URL=" + queueURL}
	slowURL := slowSQS(b, queueURL, sqsLatency)
	for _, fn := range []struct {
		name, function string // the template's function
		env            []string
		gap            time.Duration // between invocations
		status         int           // each answers (0: an SQS event's answer)
	}{
		{"send", "SendFunction", nil, 0, 202}, {"send-queued", "SendFunction", queued, 0, 202}, {"deliver", "DeliverFunction", queued, 0, 0},
		{"verify", "VerifyFunction", nil, 0, 422}, {"login", "LoginFunction", nil, 0, 401},
		{"send-queued-idle", "SendFunction", []string{"DELIVERY_MODE=queue", "DELIVERY_QUEUE_URL=" + slowURL}, 1100 * time.Millisecond, 202},
	} {
		b.Run(fn.name, func(b *testing.B) {
			events := warmEvents(b, st, fn.name, b.N+1)
			e := startEmulated(b, rie, builtBootstrap(b, bin, fn.function), st.env(append([]string{"EMAIL_PER_SECOND=100000"}, fn.env...)...))
			defer e.stop()
			// the first invocation starts the function: not counted
			if got := invokeWarm(b, e, fn.name+"-start", events[0]); got != fn.status {
				b.Fatalf("%s: the first invocation answered %d, want %d", fn.name, got, fn.status)
			}
			statuses := map[int]int{}
			emails, depth := len(st.aws.Emails()), sqsdouble.Depth(b, queueURL)
			ids := make([]string, 0, b.N)
			b.ResetTimer()
			for i, ev := range events[1:] {
				time.Sleep(fn.gap)
				ids = append(ids, fmt.Sprintf("%s-%d", fn.name, i))
				statuses[invokeWarm(b, e, ids[i], ev)]++
			}
			b.StopTimer()
			// what each did: mailed in the request, queued, or delivered
			mailed, queuedNow := len(st.aws.Emails())-emails, sqsdouble.Depth(b, queueURL)-depth
			if want := map[string][2]int{"send": {b.N, 0}, "send-queued": {0, b.N}, "send-queued-idle": {0, b.N}, "deliver": {b.N, 0}}[fn.name]; mailed != want[0] || queuedNow != want[1] {
				b.Fatalf("%s: %d mailed and %d queued, want %v", fn.name, mailed, queuedNow, want)
			}
			if statuses[fn.status] != b.N {
				b.Fatalf("%s: answers %v, want %d of %d", fn.name, statuses, b.N, fn.status)
			}
			reports := e.reports(b, ids)
			took, billed := make([]float64, len(reports)), make([]float64, len(reports))
			for i, r := range reports {
				if r.init != 0 {
					b.Fatalf("%s: invocation %s started the function (Init Duration %.2f ms): not a warm one", fn.name, ids[i], r.init)
				}
				took[i], billed[i] = r.duration, r.billed
			}
			b.ReportMetric(rank(took, 50), "p50-ms")
			b.ReportMetric(rank(took, 99), "p99-ms")
			b.ReportMetric(rank(billed, 50), "p50-billed-ms")
			b.ReportMetric(rank(billed, 99), "p99-billed-ms")
		})
	}
}

// rank is the p-th percentile of xs by nearest rank: the smallest x with
// at least p% of xs at or below it.
func rank(xs []float64, p int) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[(len(s)*p+99)/100-1]
}

// builtBootstrap is the bootstrap of the template's function, built by
// its Makefile target (makeBootstrap) into dir once per run.
func builtBootstrap(tb testing.TB, dir, function string) string {
	exe := filepath.Join(dir, function, "bootstrap")
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	return makeBootstrap(tb, function, dir)
}

// invokeWarm invokes the emulated function with ev as id and returns the
// status code it answered (0 for an SQS event); a function error, an
// answer that is not JSON or an SQS message it failed fails tb.
func invokeWarm(tb testing.TB, e *emulated, id string, ev []byte) int {
	tb.Helper()
	body, isErr := e.invoke(tb, id, ev)
	var resp struct {
		StatusCode        int
		BatchItemFailures []any `json:"batchItemFailures"`
	}
	if isErr || json.Unmarshal(body, &resp) != nil || len(resp.BatchItemFailures) != 0 {
		tb.Fatalf("invocation %s: %s", id, body)
	}
	return resp.StatusCode
}

// sqsLatency stands in for SQS's own latency in send-queued-idle, which
// goaws in this process does not have: a call from Lambda to SQS crosses
// a network. It is an assumed figure; your stack's is in X-Ray or in the
// send function's Duration beside its Redis calls.
const sqsLatency = 5 * time.Millisecond

// slowSQS is queueURL behind a proxy that answers each call latency
// later than goaws does.
func slowSQS(b *testing.B, queueURL string, latency time.Duration) string {
	b.Helper()
	u, err := url.Parse(queueURL)
	if err != nil {
		b.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(latency)
		proxy.ServeHTTP(w, r)
	}))
	b.Cleanup(srv.Close)
	return srv.URL + u.Path
}

// warmEvents are n events of benchmark name, each from a new client
// address for a new address (or user); deliver's are SQS events of one
// message each, a send's email sealed as the send function queues it.
func warmEvents(b *testing.B, st benchStack, name string, n int) [][]byte {
	b.Helper()
	if name == "deliver" {
		return deliverEvents(b, st, n)
	}
	fn, _, _ := strings.Cut(name, "-") // send-queued, send-queued-idle: a send
	raw, err := os.ReadFile(filepath.Join(root, "events", fn+".json"))
	if err != nil {
		b.Fatal(err)
	}
	events := make([][]byte, n)
	first := warmSeq.Add(int64(n)) - int64(n) // each run its own addresses: a send's rules allow 2 a minute
	for i := range events {
		events[i] = warmEvent(b, raw, fn, int(first)+i)
	}
	return events
}

// warmSeq numbers the events' addresses across runs.
var warmSeq atomic.Int64

// deliverEvents are n SQS events of one queued email each, rendered and
// sealed as the send function queues them (the stack's hash secret), for
// addresses no send used.
func deliverEvents(b *testing.B, st benchStack, n int) [][]byte {
	b.Helper()
	rdb := st.rs.Client()
	defer rdb.Close()
	box := &sealedBox{}
	q, err := queue.New(queue.Host{Redis: rdb, Secret: []byte(strings.Repeat("h", 48)), Void: func(context.Context, string) error { return nil }}, box, queue.Options{})
	if err != nil {
		b.Fatal(err)
	}
	events := make([][]byte, n)
	for i := range events {
		to, code := fmt.Sprintf("deliver%d@example.com", i), fmt.Sprintf("%06d", i%1000000)
		content, err := templates.Render("email", "", templates.Data{Code: code, Purpose: "login", TTL: 5 * time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		m := message.Message{Channel: message.Email, To: to, Purpose: "login", Locale: "en", Code: code, Subject: content.Subject,
			Text: content.Text, HTML: content.HTML, Slot: "otp\x00" + to + "\x00login", TTL: 5 * time.Minute, Receipt: "bench"}
		if err := q.Send(context.Background(), m); err != nil {
			b.Fatal(err)
		}
		var ev lambdaevents.SQSEvent
		ev.Records = append(ev.Records, lambdaevents.SQSMessage{MessageId: fmt.Sprint("m", i), ReceiptHandle: "rh", Body: box.bodies[i],
			Attributes: map[string]string{"ApproximateReceiveCount": "1"}, EventSource: "aws:sqs"})
		events[i], _ = json.Marshal(ev)
	}
	return events
}

// warmEvent is the sample event raw of fn from client address i, for
// address (or user) i.
func warmEvent(b *testing.B, raw []byte, fn string, i int) []byte {
	b.Helper()
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		b.Fatal(err)
	}
	ip := fmt.Sprintf("10.%d.%d.%d", 1+i>>16&255, i>>8&255, i&255)
	who := fmt.Sprintf("warm%d@example.com", i)
	switch fn {
	case "send":
		ev["body"] = fmt.Sprintf(`{"channel":"email","to":%q,"purpose":"login"}`, who)
	case "verify":
		ev["body"] = fmt.Sprintf(`{"to":%q,"purpose":"login","code":"123456"}`, who)
	case "login":
		ev["body"] = fmt.Sprintf(`{"username":%q,"password":"correct horse battery staple"}`, who)
	}
	ev["headers"].(map[string]any)["x-forwarded-for"] = ip
	ev["requestContext"].(map[string]any)["http"].(map[string]any)["sourceIp"] = ip
	out, _ := json.Marshal(ev)
	return out
}
