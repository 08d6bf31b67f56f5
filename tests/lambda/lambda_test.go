// Package lambda runs each function's real bootstrap binary (built with
// -tags lambda.norpc, as `make build` does) under a Lambda Runtime API
// endpoint served by the test, against a real redis-server and a local
// AWS endpoint, and feeds it the sample events of events/.
package lambda

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/apigw"
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
	"github.com/otpguard/otpguard/tests/internal/sqsdouble"
)

const root = "../.."

// runtimeAPI is the part of the Lambda Runtime API aws-lambda-go speaks:
// GET next invocation, POST its response or error, POST an init error.
type runtimeAPI struct {
	*httptest.Server
	events    chan invocation
	mu        sync.Mutex
	results   map[string]chan result
	firstNext chan time.Time
	initErr   chan string
}

type invocation struct {
	id    string
	event []byte
}

type result struct {
	body  []byte
	isErr bool
}

func newRuntimeAPI() *runtimeAPI {
	r := &runtimeAPI{events: make(chan invocation), results: map[string]chan result{}, firstNext: make(chan time.Time, 1), initErr: make(chan string, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, req *http.Request) {
		select {
		case r.firstNext <- time.Now():
		default:
		}
		select {
		case inv := <-r.events:
			w.Header().Set("Lambda-Runtime-Aws-Request-Id", inv.id)
			w.Header().Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(10*time.Second).UnixMilli(), 10))
			w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:otpguard-test")
			w.Header().Set("Lambda-Runtime-Trace-Id", "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1")
			_, _ = w.Write(inv.event)
		case <-req.Context().Done():
		}
	})
	done := func(isErr bool) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			body, _ := io.ReadAll(req.Body)
			r.mu.Lock()
			ch := r.results[req.PathValue("id")]
			r.mu.Unlock()
			if ch != nil {
				ch <- result{body, isErr}
			}
			w.WriteHeader(http.StatusAccepted)
		}
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", done(false))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", done(true))
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.initErr <- string(body)
		w.WriteHeader(http.StatusAccepted)
	})
	r.Server = httptest.NewServer(mux)
	return r
}

// invoke hands the running function one API Gateway event and decodes
// its answer.
func (r *runtimeAPI) invoke(t *testing.T, id string, event []byte) events.APIGatewayV2HTTPResponse {
	t.Helper()
	res := r.invokeRaw(t, id, event)
	if res.isErr {
		t.Fatalf("invocation error: %s", res.body)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(res.body, &resp); err != nil {
		t.Fatalf("response %s: %v", res.body, err)
	}
	return resp
}

// sample is each events/*.json and the answer docs/api.md documents.
var samples = map[string]struct {
	fn     string
	status int
	check  func(t *testing.T, body map[string]any)
}{
	"send.json": {"send", 202, func(t *testing.T, b map[string]any) {
		eq(t, b["status"], "pending")
		eq(t, b["to"], "a***@example.com")
		eq(t, b["expiresIn"], 300.0) // the config parameter's otp.ttl
	}},
	"verify.json": {"verify", 422, func(t *testing.T, b map[string]any) { eq(t, b["code"], "invalid_code") }},
	"jwks.json": {"jwks", 200, func(t *testing.T, b map[string]any) {
		keys, _ := b["keys"].([]any)
		if len(keys) != 1 || keys[0].(map[string]any)["alg"] != "EdDSA" {
			t.Errorf("jwks: %v", b)
		}
	}},
	"health.json": {"health", 200, func(t *testing.T, b map[string]any) { eq(t, b["status"], "ok") }},
	"login.json": {"login", 200, func(t *testing.T, b map[string]any) {
		eq(t, b["status"], "authenticated")
		res, _ := b["authenticationResult"].(map[string]any)
		eq(t, res["accessToken"], "access-ann@example.com")
	}},
	"signup.json": {"signup", 202, func(t *testing.T, b map[string]any) { eq(t, b["status"], "pending") }},
	"decisions.json": {"backend", 200, func(t *testing.T, b map[string]any) {
		eq(t, b["allowed"], true)
		if rules, _ := b["rules"].([]any); len(rules) == 0 {
			t.Errorf("no rules in the decision: %v", b)
		}
	}},
}

func eq(t *testing.T, got, want any) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestEverySampleEventDecodesIntoARequest(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(root, "events", "*.json"))
	if len(files) != len(samples) {
		t.Fatalf("%d sample events, %d expected answers: every events/*.json needs one", len(files), len(samples))
	}
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		var e events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		r, err := apigw.Request(context.Background(), e)
		if err != nil || r.RemoteAddr == "" || r.URL.Path != e.RawPath || r.Method != e.RequestContext.HTTP.Method {
			t.Errorf("%s: %v %+v", f, err, r)
		}
	}
}

// lambdaRedis is a Redis the functions run against: its REDIS_URL and
// password (in the REDIS_PASSWORD_SECRET_ID secret, as the stack has it),
// and a client with every right for the test's own reads.
type lambdaRedis struct {
	name, url, password string
	admin               *redis.Client
}

func lambdaBackends(t *testing.T) []lambdaRedis {
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	rdb := rs.Client()
	if err := rdb.ConfigSet(context.Background(), "requirepass", "redis-password-for-the-test").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	plain := redis.NewClient(&redis.Options{Addr: rs.Addr, Password: "redis-password-for-the-test"})
	t.Cleanup(func() { plain.Close() })
	access, err := redistest.TemplateAccessString(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	double, err := redistest.StartServerless(redistest.ServerlessOptions{AccessString: access, NoScriptEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(double.Close)
	admin := double.Admin()
	t.Cleanup(func() {
		if d, err := double.Denials(context.Background()); err != nil || len(d) > 0 {
			t.Errorf("the stack's cache user was refused on the Serverless double: %v %v", d, err)
		}
		if n := double.ReplicaConnections(); n > 0 {
			t.Errorf("the Serverless double's replica port was dialed %d times", n)
		}
		admin.Close()
	})
	return []lambdaRedis{
		{"redis", "redis://" + rs.Addr, "redis-password-for-the-test", plain},
		{"serverless", double.URLWithoutPassword(), double.Password, admin},
	}
}

// TestBootstrapsUnderTheRuntimeAPI runs each function's bootstrap under
// the Runtime API on plain Redis (with AUTH) and on the ElastiCache
// Serverless double (the stack's cache user, no FUNCTION, TIME refused in
// scripts, NOSCRIPT now and then, a replica that never answers), feeds
// it its sample event, cold then warm.
func TestBootstrapsUnderTheRuntimeAPI(t *testing.T) {
	bin := t.TempDir()
	for _, rb := range lambdaBackends(t) {
		t.Run(rb.name, func(t *testing.T) { bootstraps(t, bin, rb) })
	}
}

func bootstraps(t *testing.T, bin string, rb lambdaRedis) {
	rdb := rb.admin
	aws := awsfake.New()
	defer aws.Close()
	aws.SetSecret("otpguard/hash", strings.Repeat("h", 48))
	aws.SetSecret("otpguard/signing", strings.Repeat("s", 64))
	aws.SetParameter("/otpguard/config", "otp: {ttl: 5m}\n")
	aws.SetSecret("otpguard/redis", rb.password)
	aws.SetUser("ann@example.com", awsfake.User{Password: "correct horse battery staple", Confirmed: true})

	for file, s := range samples {
		t.Run(s.fn, func(t *testing.T) {
			// As its role would: the secrets the function does not need
			// are refused (TestPolicyARNsNameWhatTheFunctionsRead checks
			// the template grants exactly these).
			fn := function(t, s.fn)
			aws.Deny("secretsmanager:GetSecretValue", "otpguard/signing", !fn.Signs)
			aws.Deny("secretsmanager:DescribeSecret", "otpguard/signing", !fn.Signs)
			aws.Deny("secretsmanager:GetSecretValue", "otpguard/hash", !fn.Hashes)
			exe := buildBootstrap(t, bin, s.fn)
			api := newRuntimeAPI()
			defer api.Close()
			cmd := exec.Command(exe)
			var stdout, stderr testutil.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Env = []string{
				"AWS_LAMBDA_RUNTIME_API=" + strings.TrimPrefix(api.URL, "http://"),
				"AWS_LAMBDA_FUNCTION_NAME=otpguard-" + s.fn, "AWS_LAMBDA_FUNCTION_VERSION=$LATEST", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256",
				"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret", "AWS_SESSION_TOKEN=token",
				"AWS_ENDPOINT_URL=" + aws.URL,
				"REDIS_URL=" + rb.url, "REDIS_PASSWORD_SECRET_ID=otpguard/redis", "GUARD_CONFIG_PARAM=/otpguard/config",
				"GUARD_HASH_SECRET_ID=otpguard/hash", "GUARD_SIGNING_SECRET_ID=otpguard/signing",
				"SES_FROM=no-reply@otpguard.example", "SMS_SENDER_ID=OTPGUARD",
				"AUTH=cognito", "COGNITO_USER_POOL_ID=us-east-1_test", "COGNITO_CLIENT_ID=testclient",
			}
			began := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			select {
			case at := <-api.firstNext:
				t.Logf("%s: init took %s (process start to first next-invocation request)", s.fn, at.Sub(began).Round(time.Millisecond))
				if at.Sub(began) > 5*time.Second {
					t.Errorf("init took %s", at.Sub(began))
				}
			case msg := <-api.initErr:
				t.Fatalf("init error: %s\n%s", msg, stderr.String())
			case <-time.After(60 * time.Second):
				t.Fatalf("the bootstrap never asked for an invocation; stderr:\n%s", stderr.String())
			}

			event, err := os.ReadFile(filepath.Join(root, "events", file))
			if err != nil {
				t.Fatal(err)
			}
			first := api.invoke(t, "req-1", event)
			checkAnswer(t, first, s.status, s.check)
			conns := connectionsReceived(t, rdb)
			calls := len(aws.Calls())

			// The warm second invoke reuses the container's clients: no new
			// Redis connection, no new secret or parameter fetch.
			second := api.invoke(t, "req-2", event)
			switch s.fn {
			case "send":
				checkAnswer(t, second, 202, nil) // the default allows 2 a minute
			case "backend":
				if toHeader(second.Headers).Get("RateLimit") == "" || toHeader(second.Headers).Get("RateLimit-Policy") == "" {
					t.Errorf("no RateLimit header: %v", second.Headers)
				}
				checkAnswer(t, second, s.status, s.check)
			default:
				checkAnswer(t, second, s.status, s.check)
			}
			if got := connectionsReceived(t, rdb); got != conns {
				t.Errorf("the warm invoke opened %d new Redis connections", got-conns)
			}
			newCalls := aws.Calls()[calls:]
			for _, c := range newCalls {
				if c != "sesv2:SendEmail" && !strings.HasPrefix(c, "cognito-idp:") {
					t.Errorf("the warm invoke called %s again", c)
				}
			}

			guarded := s.fn != "jwks" && s.fn != "health"
			// The decision record of the second invoke is written as it
			// ends: wait for the process's output to reach the test.
			logs := waitFor(&stderr, `"requestId":"req-2"`)
			if guarded && !strings.Contains(logs, `"requestId":"req-2"`) {
				t.Errorf("no decision record with the Lambda request id in the logs:\n%s", logs)
			}
			if s.fn == "login" && strings.Contains(logs, "correct horse") {
				t.Error("the password is in the function's logs")
			}
			if s.fn == "send" {
				emails := aws.Emails()
				if len(emails) < 2 || emails[0].To[0] != "ann@example.com" {
					t.Fatalf("emails sent: %+v", emails)
				}
				for _, e := range emails {
					code := strings.Fields(e.Subject)[0]
					if strings.Contains(logs, code) || strings.Contains(stdout.String(), code) {
						t.Errorf("the code %s is in the function's output", code)
					}
				}
				if strings.Contains(logs, "ann@example.com") {
					t.Error("the address is in the function's logs")
				}
			}
			if guarded && !strings.Contains(waitFor(&stdout, `"CloudWatchMetrics"`), `"CloudWatchMetrics"`) {
				t.Errorf("no EMF metrics on stdout:\n%s", stdout.String())
			}
		})
	}
}

func toHeader(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}

// waitFor returns b's text once it holds want, or after 30 seconds.
func waitFor(b *testutil.Buffer, want string) string {
	out, _ := b.WaitFor(want, 30*time.Second)
	return out
}

func checkAnswer(t *testing.T, resp events.APIGatewayV2HTTPResponse, status int, check func(*testing.T, map[string]any)) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, resp.Body)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
		t.Fatalf("body %q: %v", resp.Body, err)
	}
	if check != nil {
		check(t, body)
	}
}

func connectionsReceived(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no total_connections_received in %q", info)
	return 0
}

// BenchmarkInit starts the verify, send and login bootstraps b.N times each
// (make bench runs -benchtime=21x), each built by its template function's
// Makefile target and with the stack's default DeliveryMode (queue),
// under AWS's Lambda Runtime Interface Emulator, which starts a bootstrap
// on its first invocation. It reports the median and the largest of two
// figures the emulator writes: the init, from its INIT REPORT line (from
// the bootstrap's start to its first request for an event: its secrets,
// config, Redis client and library load), as Lambda's Init Duration
// measures it; and the cold start, the first invocation's Duration, which
// holds the init and the first request (its REPORT line's own Init
// Duration does not wait for the bootstrap: 0.03 to 2 ms seen). Lambda
// bills both. Each first invocation must answer as BenchmarkWarm's do,
// and its Duration must hold its init. (ns/op is the emulator's start and
// the wait for its port, not a figure.)
func BenchmarkInit(b *testing.B) {
	st := newBenchStack(b, "otp: {ttl: 5m}\nnetwork: {trustedProxies: [0.0.0.0/0]}\n")
	bin := b.TempDir()
	rie := buildRIE(b, bin)
	queueURL, _ := sqsdouble.Queue(b, fmt.Sprint("init-", time.Now().UnixNano()), 5)
	for _, fn := range []struct {
		name, function string
		status         int
	}{{"verify", "VerifyFunction", 422}, {"send", "SendFunction", 202}, {"login", "LoginFunction", 401}} {
		b.Run(fn.name, func(b *testing.B) {
			exe := builtBootstrap(b, bin, fn.function)
			events := warmEvents(b, st, fn.name, b.N)
			env := st.env("EMAIL_PER_SECOND=100000", "DELIVERY_MODE=queue", "DELIVERY_QUEUE_URL="+queueURL) // not paced, as in BenchmarkWarm
			var inits, colds []float64
			b.ResetTimer()
			for i := range b.N {
				e := startEmulated(b, rie, exe, env)
				id := fmt.Sprintf("init-%s-%d", fn.name, i)
				if got := invokeWarm(b, e, id, events[i]); got != fn.status {
					b.Fatalf("%s: answered %d, want %d", id, got, fn.status)
				}
				cold, init := e.reports(b, []string{id})[0].duration, e.initReport(b)
				if init > cold {
					b.Fatalf("%s: an init of %.2f ms outside the first invocation's Duration of %.2f ms: the emulator no longer starts the bootstrap within it", id, init, cold)
				}
				colds, inits = append(colds, cold), append(inits, init)
				e.stop()
			}
			b.StopTimer()
			b.ReportMetric(rank(inits, 50), "median-init-ms")
			b.ReportMetric(slices.Max(inits), "max-init-ms")
			b.ReportMetric(rank(colds, 50), "median-cold-ms")
			b.ReportMetric(slices.Max(colds), "max-cold-ms")
		})
	}
}

// benchStack is what the benchmarks' bootstraps run against: a
// redis-server and a local AWS endpoint holding the secrets and the
// config parameter (doc).
type benchStack struct {
	rs  *redistest.Server
	aws *awsfake.Server
}

func newBenchStack(b *testing.B, doc string) benchStack {
	rs, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rs.Close)
	aws := awsfake.New()
	b.Cleanup(aws.Close)
	aws.SetSecret("otpguard/hash", strings.Repeat("h", 48))
	aws.SetSecret("otpguard/signing", strings.Repeat("s", 64))
	aws.SetParameter("/otpguard/config", doc)
	return benchStack{rs, aws}
}

// env is a bootstrap's environment under the emulator (which adds the
// Runtime API's address), with extra added.
func (st benchStack) env(extra ...string) []string {
	return append([]string{
		"PATH=/usr/bin:/bin", "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret",
		"AWS_ENDPOINT_URL=" + st.aws.URL, "REDIS_URL=redis://" + st.rs.Addr, "GUARD_CONFIG_PARAM=/otpguard/config",
		"GUARD_HASH_SECRET_ID=otpguard/hash", "GUARD_SIGNING_SECRET_ID=otpguard/signing",
		"SES_FROM=no-reply@otpguard.example", "AUTH=cognito", "COGNITO_CLIENT_ID=testclient", "COGNITO_USER_POOL_ID=us-east-1_test",
	}, extra...)
}

// TestPackageInitIsLean runs the verify, send and login bootstraps with
// GODEBUG=inittrace=1 and no environment (main refuses to start, after every
// package has initialised) and checks what package initialisation allocates:
// a deterministic stand-in for its time. Upstream phonenumbers parses its
// whole metadata document in init (2.4 MB, 35,000 allocations, ~5 ms, paid by
// every cold start); the fork in third_party loads it on first use.
func TestPackageInitIsLean(t *testing.T) {
	const maxTotal, maxPhone = 1 << 20, 512 << 10
	bin := t.TempDir()
	for _, fn := range []string{"verify", "send", "login"} {
		exe := buildBootstrap(t, bin, fn)
		cmd := exec.Command(exe)
		cmd.Env = []string{"GODEBUG=inittrace=1"}
		out, _ := cmd.CombinedOutput()
		var total, phone, packages int
		for line := range strings.Lines(string(out)) {
			// init <package> @<t> ms, <d> ms clock, <n> bytes, <m> allocs
			f := strings.Fields(line)
			if len(f) < 11 || f[0] != "init" || f[8] != "bytes," {
				continue
			}
			n, err := strconv.Atoi(f[7])
			if err != nil {
				t.Fatalf("%s: unreadable inittrace line %q", fn, line)
			}
			packages++
			total += n
			if f[1] == "github.com/nyaruka/phonenumbers" {
				phone = n
			}
		}
		if packages < 10 {
			t.Fatalf("%s: %d inittrace lines; output:\n%s", fn, packages, out)
		}
		t.Logf("%-6s package init allocates %7d bytes (phonenumbers %d) over %d packages", fn, total, phone, packages)
		if total > maxTotal || phone > maxPhone {
			t.Errorf("%s: package init allocates %d bytes (phonenumbers %d); budget %d (%d)", fn, total, phone, maxTotal, maxPhone)
		}
	}
}

// buildBootstrap builds function fn's bootstrap into dir as make build does
// (for this machine's platform) and returns its path.
func buildBootstrap(tb testing.TB, dir, fn string) string {
	tb.Helper()
	exe := filepath.Join(dir, fn)
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", exe, "./functions/"+fn)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", fn, err, out)
	}
	return exe
}

// function is the lambdaapp.Function of a bootstrap.
func function(t *testing.T, name string) lambdaapp.Function {
	for _, fn := range lambdaapp.Functions {
		if fn.Name == name {
			return fn
		}
	}
	t.Fatalf("no function %s", name)
	return lambdaapp.Function{}
}

// TestABootstrapThatCannotReadItsConfigAnswersNotReady: a function whose
// role may not read the config parameter (a wrong name gives AccessDenied)
// stays up under the Runtime API: no init error (Lambda would restart it
// on every request), 503 not_ready naming the dependency, and it serves
// once the parameter can be read.
func TestABootstrapThatCannotReadItsConfigAnswersNotReady(t *testing.T) {
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	aws := awsfake.New()
	defer aws.Close()
	aws.SetParameter("/otpguard/config", "otp: {ttl: 5m}\n")
	aws.Deny("ssm:GetParameter", "/otpguard/config", true)
	exe := buildBootstrap(t, t.TempDir(), "health")
	api := newRuntimeAPI()
	defer api.Close()
	cmd := exec.Command(exe)
	var stdout, stderr testutil.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = []string{
		"AWS_LAMBDA_RUNTIME_API=" + strings.TrimPrefix(api.URL, "http://"), "AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret", "AWS_ENDPOINT_URL=" + aws.URL,
		"REDIS_URL=redis://" + rs.Addr, "GUARD_CONFIG_PARAM=/otpguard/config", "STACK_NAME=test",
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	select {
	case <-api.firstNext:
	case msg := <-api.initErr:
		t.Fatalf("init error posted (a crash loop): %s", msg)
	case <-time.After(60 * time.Second):
		t.Fatalf("the bootstrap never asked for an invocation: %s", stderr.String())
	}
	event, err := os.ReadFile(filepath.Join(root, "events", "health.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkAnswer(t, api.invoke(t, "req-1", event), 503, func(t *testing.T, b map[string]any) {
		if b["code"] != "not_ready" || !strings.Contains(b["detail"].(string), "the config parameter") {
			t.Errorf("not ready: %v", b)
		}
	})
	aws.Deny("ssm:GetParameter", "/otpguard/config", false)
	time.Sleep(1100 * time.Millisecond)
	checkAnswer(t, api.invoke(t, "req-2", event), 200, func(t *testing.T, b map[string]any) { eq(t, b["status"], "ok") })
	if cmd.ProcessState != nil {
		t.Error("the process exited")
	}
}
