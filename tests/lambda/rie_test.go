package lambda

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
	"github.com/otpguard/otpguard/tests/internal/sqsdouble"
)

// The bootstraps under AWS's Lambda Runtime Interface Emulator
// (github.com/aws/aws-lambda-runtime-interface-emulator): the Runtime API
// server AWS ships in its base images and `sam local` runs, a runtime no
// one here wrote. It is a tool dependency of this module (go.mod's tool
// directive), built from the module cache at test time: its code and its
// binary are never committed.

// rieModule is the emulator's command, as go.mod's tool directive names it.
const rieModule = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"

// buildRIE builds the emulator into dir.
func buildRIE(t testing.TB, dir string) string {
	t.Helper()
	exe := filepath.Join(dir, "aws-lambda-rie")
	build := exec.Command("go", "build", "-o", exe, rieModule)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the Runtime Interface Emulator (%s): %v\n%s", rieModule, err, out)
	}
	return exe
}

// makeBootstrap builds a template function as `sam build` does, through
// its Makefile target (make build-<LogicalId>), for this machine's
// architecture (the template's arm64 does not run here).
func makeBootstrap(t testing.TB, logicalID, dir string) string {
	t.Helper()
	out := filepath.Join(dir, logicalID)
	cmd := exec.Command("make", "--no-print-directory", "build-"+logicalID, "LAMBDA_GOARCH="+runtime.GOARCH, "ARTIFACTS_DIR="+out, "ASN_DATABASE=")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build-%s: %v\n%s", logicalID, err, b)
	}
	return filepath.Join(out, "bootstrap")
}

// templateFunction is a function of the translated template: what Lambda
// gives the bootstrap (its environment, timeout, memory).
type templateFunction struct {
	Timeout    float64
	MemorySize float64
	Env        map[string]any
}

func templateFunctions(t *testing.T) map[string]templateFunction {
	t.Helper()
	out, err := exec.Command("python3", filepath.Join(root, "tests", "deploy", "translate.py"), filepath.Join(root, "template.yaml")).Output()
	if err != nil {
		t.Fatalf("aws-sam-translator: %v", err)
	}
	var tmpl struct {
		Resources map[string]struct {
			Type       string
			Properties struct {
				Timeout, MemorySize float64
				Environment         struct{ Variables map[string]any }
			}
		}
	}
	if err := json.Unmarshal(out, &tmpl); err != nil {
		t.Fatal(err)
	}
	fns := map[string]templateFunction{}
	for name, r := range tmpl.Resources {
		if r.Type == "AWS::Lambda::Function" {
			fns[name] = templateFunction{r.Properties.Timeout, r.Properties.MemorySize, r.Properties.Environment.Variables}
		}
	}
	return fns
}

// stackValues are what the stack's resources and parameters resolve to
// here: the fakes' names. The parameters without one take their default.
type stackValues struct {
	refs       map[string]string // resources and parameters without a default
	attrs      map[string]string // ${Resource.Attribute}
	conditions map[string]bool   // under the default parameters
	params     map[string]string // the parameters' defaults
}

func (v stackValues) resolve(t *testing.T, name string, e any) string {
	t.Helper()
	switch x := e.(type) {
	case string:
		return x
	case map[string]any:
		for fn, arg := range x {
			switch fn {
			case "Ref":
				ref := arg.(string)
				if s, ok := v.refs[ref]; ok {
					return s
				}
				if s, ok := v.params[ref]; ok {
					return s
				}
				t.Fatalf("%s: Ref %s has no value here", name, ref)
			case "Fn::If":
				a := arg.([]any)
				c, ok := v.conditions[a[0].(string)]
				if !ok {
					t.Fatalf("%s: condition %v has no value here", name, a[0])
				}
				if c {
					return v.resolve(t, name, a[1])
				}
				return v.resolve(t, name, a[2])
			case "Fn::Sub":
				s, _ := arg.(string)
				return regexp.MustCompile(`\$\{([^}]+)\}`).ReplaceAllStringFunc(s, func(m string) string {
					k := m[2 : len(m)-1]
					if a, ok := v.attrs[k]; ok {
						return a
					}
					return v.resolve(t, name, map[string]any{"Ref": k})
				})
			case "Fn::GetAtt":
				var k string
				switch a := arg.(type) {
				case string:
					k = a
				case []any:
					k = fmt.Sprint(a[0]) + "." + fmt.Sprint(a[1])
				}
				if s, ok := v.attrs[k]; ok {
					return s
				}
				t.Fatalf("%s: GetAtt %s has no value here", name, k)
			}
		}
	}
	t.Fatalf("%s: %v does not resolve here", name, e)
	return ""
}

// emulated is one bootstrap under the emulator.
type emulated struct {
	url string
	// out is what the emulator and the bootstrap write (the emulator
	// passes the function's stdout and stderr through, as Lambda sends
	// both to the function's log group)
	out *testutil.Buffer
	// stop stops the emulator and the bootstrap (also when the test ends)
	stop func()
}

// startEmulated starts the emulator on free loopback ports with the
// bootstrap and env, and waits for it to listen.
func startEmulated(t testing.TB, rie, bootstrap string, env []string) *emulated {
	t.Helper()
	e := &emulated{out: &testutil.Buffer{}}
	p, ports, err := testutil.StartOnFreePorts(2, 30*time.Second, func(ports []int) *exec.Cmd {
		cmd := exec.Command(rie, "--runtime-api-address", "127.0.0.1:"+strconv.Itoa(ports[0]),
			"--runtime-interface-emulator-address", "127.0.0.1:"+strconv.Itoa(ports[1]), bootstrap)
		cmd.Dir = filepath.Dir(bootstrap)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the emulator and the bootstrap it starts
		cmd.Stdout, cmd.Stderr = e.out, e.out
		return cmd
	})
	if err != nil {
		t.Fatalf("the emulator never listened: %v\n%s", err, e.out.String())
	}
	// once: a second Stop would signal a process group whose pid may
	// have been given to another
	e.stop = sync.OnceFunc(p.Stop)
	t.Cleanup(e.stop)
	e.url = "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/2015-03-31/functions/function/invocations"
	return e
}

// invoke posts an event to the emulator's invoke endpoint (as `sam local
// invoke` and the AWS base images' emulator take it) and returns the
// function's answer and whether it is an error (errorMessage/errorType).
func (e *emulated) invoke(t testing.TB, id string, event []byte) ([]byte, bool) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url, bytes.NewReader(event))
	req.Header.Set("X-Amzn-RequestId", id)
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("invoke %s: %v\n%s", id, err, e.out.String())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("invoke %s: the emulator answered %d %s\n%s%s", id, resp.StatusCode, body, e.out.String(), "")
	}
	var fnErr struct{ ErrorMessage, ErrorType string }
	if json.Unmarshal(body, &fnErr) == nil && fnErr.ErrorType != "" {
		return body, true
	}
	return body, false
}

// report is what the emulator's REPORT line of an invocation says, in
// milliseconds: its Duration and Billed Duration, and its Init Duration
// when the invocation started the function (else 0).
type report struct{ duration, billed, init float64 }

// reportLine is the emulator's REPORT line (internal/lambda/rie's
// printEndReports): RequestId, then Init Duration on the invocation that
// started the function, Duration and Billed Duration, tab-separated.
var reportLine = regexp.MustCompile(`(?m)^REPORT RequestId: (\S+)\t(?:Init Duration: ([0-9.]+) ms\t)?Duration: ([0-9.]+) ms\tBilled Duration: ([0-9]+) ms\t`)

// initLine is the emulator's log line of a bootstrap's init, from its
// start to its first request for an event (rapid's INIT REPORT).
var initLine = regexp.MustCompile(`\(rapid\) INIT REPORT\(durationMs: ([0-9.]+)\)`)

// initReport is the duration in milliseconds of the bootstrap's init that
// the emulator logged, once it has: exactly one, or tb fails.
func (e *emulated) initReport(tb testing.TB) float64 {
	tb.Helper()
	out, _ := e.out.WaitFor("INIT REPORT(durationMs: ", 10*time.Second)
	m := initLine.FindAllStringSubmatch(out, -1)
	if len(m) != 1 {
		tb.Fatalf("%d INIT REPORT lines from the emulator, want 1:\n%s", len(m), out)
	}
	ms, err := strconv.ParseFloat(m[0][1], 64)
	if err != nil {
		tb.Fatal(err)
	}
	return ms
}

// reports are the REPORT lines of invocations ids, in their order, once
// the emulator has written the last one; an invocation without exactly
// one fails tb.
func (e *emulated) reports(tb testing.TB, ids []string) []report {
	tb.Helper()
	out, ok := e.out.WaitFor("REPORT RequestId: "+ids[len(ids)-1]+"\t", 10*time.Second)
	if !ok {
		tb.Fatalf("the emulator wrote no REPORT line for %s", ids[len(ids)-1])
	}
	byID := map[string][]report{}
	for _, m := range reportLine.FindAllStringSubmatch(out, -1) {
		var r report
		var err [3]error
		if m[2] != "" {
			r.init, err[0] = strconv.ParseFloat(m[2], 64)
		}
		r.duration, err[1] = strconv.ParseFloat(m[3], 64)
		r.billed, err[2] = strconv.ParseFloat(m[4], 64)
		if e := errors.Join(err[:]...); e != nil {
			tb.Fatalf("REPORT line %q: %v", m[0], e)
		}
		byID[m[1]] = append(byID[m[1]], r)
	}
	rs := make([]report, len(ids))
	for i, id := range ids {
		if len(byID[id]) != 1 {
			tb.Fatalf("%d REPORT lines for invocation %s, want 1", len(byID[id]), id)
		}
		rs[i] = byID[id][0]
	}
	return rs
}

// TestEveryFunctionUnderTheRuntimeInterfaceEmulator builds each
// template function's bootstrap with its Makefile target (for this
// machine's architecture), starts it under AWS's Runtime Interface
// Emulator with the environment, timeout and memory the template gives it
// (the stack's resources resolved to a local AWS endpoint and to the
// ElastiCache Serverless double, logged in as the stack's cache user with
// the template's access string), and invokes it with each sample event of
// events/ (events/cognito/ for the triggers), cold then warm. A custom
// sender's event retried (Cognito retries a trigger that has not answered
// in 5 seconds) sends one message and counts one; a PreAuthentication
// retried, then its PostAuthentication, leaves nothing counted.
func TestEveryFunctionUnderTheRuntimeInterfaceEmulator(t *testing.T) {
	dir := t.TempDir()
	rie := buildRIE(t, dir)
	fns := templateFunctions(t)
	if len(fns) != 10 {
		t.Fatalf("%d functions in the template, want 10", len(fns))
	}
	rb := lambdaBackends(t)[1] // the Serverless double: the stack's cache user
	aws := newTriggerAWS(rb)
	defer aws.Close()
	aws.SetSecret("otpguard/signing", strings.Repeat("s", 64))
	aws.SetParameter("/shop/otpguard/config", "otp: {ttl: 5m}\nstore: {timeout: 1s} # a loaded test machine\n")
	aws.SetUser("ann@example.com", awsfake.User{Password: "correct horse battery staple", Confirmed: true})

	queueURL, _ := sqsdouble.Queue(t, "shop-delivery", 5) // DeliveryMode queue, the default: the send function queues here
	addr := strings.TrimSuffix(strings.TrimPrefix(rb.url, "redis://otpguard@"), "?cluster=true")
	values := stackValues{
		refs: map[string]string{
			"AWS::StackName": "shop", "HashSecret": "otpguard/hash", "SigningSecret": "otpguard/signing",
			"RedisPasswordSecret": "otpguard/redis", "UserPool": "us-east-1_test", "UserPoolClient": "testclient",
			"SenderEmail": "no-reply@otpguard.example", "DeliveryQueue": queueURL,
		},
		attrs: map[string]string{
			"Cache.Endpoint.Address": strings.Split(addr, ":")[0], "Cache.Endpoint.Port": strings.Split(addr, ":")[1],
			"TriggerKey.Arn": sampleKeyARN,
		},
		conditions: map[string]bool{"CreateCache": true, "DefaultConfigName": true, "CreateUserPool": true, "QueueDelivery": true},
		params:     templateDefaults(t),
	}
	samples := map[string][]string{} // function dir -> its sample events
	for file, s := range samplesByFile() {
		samples[s] = append(samples[s], file)
	}

	for logicalID, fn := range fns {
		dirName := functionDir(t, logicalID)
		t.Run(dirName, func(t *testing.T) {
			// each function meets the store as a fresh stack would (the
			// samples share addresses and accounts)
			if err := rb.admin.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			env := []string{
				"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret", "AWS_SESSION_TOKEN=token",
				"AWS_ENDPOINT_URL=" + aws.URL, "PATH=/usr/bin:/bin",
				"AWS_LAMBDA_FUNCTION_NAME=shop-" + logicalID, "AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(fn.Timeout)),
				"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=" + strconv.Itoa(int(fn.MemorySize)),
			}
			for k, v := range fn.Env {
				val := values.resolve(t, k, v)
				if k == "REDIS_URL" {
					// the template's URL, but for TLS: the double speaks
					// plain RESP (docs/deploy.md: TLS is not verified here)
					if want := "rediss://otpguard@" + addr + "?cluster=true"; val != want {
						t.Fatalf("REDIS_URL %s, want the stack's %s", val, want)
					}
					val = rb.url
				}
				env = append(env, k+"="+val)
			}
			e := startEmulated(t, rie, makeBootstrap(t, logicalID, dir), env)
			for _, file := range samples[dirName] {
				event, err := os.ReadFile(filepath.Join(root, "events", file))
				if err != nil {
					t.Fatal(err)
				}
				for _, round := range []string{"cold", "warm"} {
					id := strings.ReplaceAll(file, "/", "-") + "-" + round
					if strings.HasPrefix(file, "cognito/") && round == "warm" {
						continue // each trigger sample is a distinct event; retries below
					}
					before := len(e.out.String())
					body, isErr := e.invoke(t, id, event)
					if round == "warm" {
						// what this request writes to the function's log group
						// (Lambda's START/END/REPORT lines included, the
						// emulator's own "(rapid)" lines not): the cost table's
						// log volume (go test -v)
						out, _ := e.out.WaitFor("REPORT RequestId: "+id, 3*time.Second)
						n := 0
						for line := range strings.Lines(out[before:]) {
							if !strings.Contains(line, "(rapid)") {
								n += len(line)
							}
						}
						t.Logf("%s: %d bytes of log for one warm request", file, n)
					}
					if isErr {
						t.Fatalf("%s (%s): the function failed: %s\n%s", file, round, body, e.out.String())
					}
					if strings.HasPrefix(file, "cognito/") {
						if !bytes.Equal(compact(t, body), compact(t, event)) {
							t.Errorf("%s: answered %s, want the event back", file, body)
						}
						continue
					}
					var resp events.APIGatewayV2HTTPResponse
					if err := json.Unmarshal(body, &resp); err != nil {
						t.Fatalf("%s: %s: %v", file, body, err)
					}
					want := samplesAnswer(file)
					status := want.status
					if file == "send.json" && round == "warm" {
						status = 202 // the default allows 2 a minute
					}
					checkAnswer(t, resp, status, want.check)
				}
			}
			switch dirName {
			case "cognitosend":
				retriedSenderSendsOnce(t, e, aws, queueURL)
			case "cognitoauth":
				retriedSignInCountsNothing(t, e, rb)
			case "deliver":
				deliverBootstrapDelivers(t, e, aws, rb)
			}
		})
	}
}

// retriedSenderSendsOnce: the custom SMS sender's sample, queued once
// above (DeliveryMode queue, the template's default), comes again
// (Cognito's retry of the same event: same code, same user): nothing is
// queued and nothing counted; a new code for the same user is a new event
// and is queued (its delivery: TestTheCustomSendersQueueToo).
func retriedSenderSendsOnce(t *testing.T, e *emulated, aws *awsfake.Server, queueURL string) {
	t.Helper()
	before := sqsdouble.Depth(t, queueURL)
	event, _ := os.ReadFile(filepath.Join(root, "events", "cognito", "custom-sms-sender.json"))
	for i := range 2 {
		if body, isErr := e.invoke(t, fmt.Sprintf("sms-retry-%d", i), event); isErr {
			t.Fatalf("retry %d: %s", i, body)
		}
	}
	if n := sqsdouble.Depth(t, queueURL) - before; n != 0 {
		t.Errorf("the retried event queued %d more SMS", n)
	}
	logs, _ := e.out.WaitFor(`"requestId":"sms-retry-1"`, 3*time.Second)
	for i := range 2 {
		if rec := record(logs, fmt.Sprintf("sms-retry-%d", i)); rec != "" {
			t.Errorf("the retried event was decided (counted) again: %s", rec)
		}
	}
	if n := strings.Count(logs, "a retried custom sender event"); n != 2 {
		t.Errorf("%d retries in the log, want 2:\n%s", n, logs)
	}
	var ev map[string]any
	_ = json.Unmarshal(event, &ev)
	ev["request"].(map[string]any)["code"] = encrypt(t, aws, sampleKeyARN, "forbid", "777777")[0]
	fresh, _ := json.Marshal(ev)
	if body, isErr := e.invoke(t, "sms-new-code", fresh); isErr {
		t.Fatalf("a new code: %s", body)
	}
	if n := sqsdouble.Depth(t, queueURL) - before; n != 1 {
		t.Errorf("a new code for the same user queued %d SMS, want 1", n)
	}
}

// retriedSignInCountsNothing: PreAuthentication's sample comes twice (the
// second, Cognito's retry after a timeout), then PostAuthentication's: the
// account's failure counters hold nothing, read in the store.
func retriedSignInCountsNothing(t *testing.T, e *emulated, rb lambdaRedis) {
	t.Helper()
	g := storeGuard(t, rb, "otp: {ttl: 5m}\n")
	// a user of its own: the samples above signed "ann" in already
	account := "ann-retried"
	full := accountRemaining(t, g, account)
	pre := withUser(t, filepath.Join(root, "events", "cognito", "pre-authentication.json"), account)
	post := withUser(t, filepath.Join(root, "events", "cognito", "post-authentication.json"), account)
	for i := range 2 {
		if body, isErr := e.invoke(t, fmt.Sprintf("pre-retry-%d", i), pre); isErr {
			t.Fatalf("PreAuthentication %d: %s", i, body)
		}
	}
	// (the account's untrusted clients' bucket counts each attempt; the
	// rules on the account's networks need the client's address, which
	// the sample does not pass, and the held count takes one attempt and
	// challenges the next)
	counted := accountRemaining(t, g, account)
	if n := full["login-per-device"]; n == 0 || counted["login-per-device"] != n-2 {
		t.Fatalf("login-per-device: %d left after two PreAuthentications, want %d (the check would see nothing)", counted["login-per-device"], n-2)
	}
	if body, isErr := e.invoke(t, "post", post); isErr {
		t.Fatalf("PostAuthentication: %s", body)
	}
	after := accountRemaining(t, g, account)
	for rule, n := range full {
		if after[rule] != n {
			t.Errorf("%s: %d left after a PreAuthentication, its retry and the PostAuthentication, want %d (nothing counted)", rule, after[rule], n)
		}
	}
}

// storeGuard is a guard on rb's store with the functions' secret and
// config: the test's own reader of what the functions counted.
func storeGuard(t *testing.T, rb lambdaRedis, doc string) *storeReader {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	// the functions' cluster client groups keys by slot; so does this one
	g, err := guard.New(cfg.Engine(), redisstore.New(grouped{rb.admin}, redisstore.Options{}),
		guard.Options{Secret: []byte(strings.Repeat("h", 48)), Backstop: memstore.New(time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	return &storeReader{g, cfg}
}

// storeReader reads what the functions counted.
type storeReader struct {
	*guard.Guard
	cfg config.Config
}

// grouped is a single-node client the store treats as a cluster's (keys
// grouped by slot), as the double's one node is.
type grouped struct{ *redis.Client }

// accountRemaining is what each failure-counting rule keyed on the
// account leaves it, in the store.
func accountRemaining(t *testing.T, g *storeReader, account string) map[string]int64 {
	t.Helper()
	st, err := g.Status(context.Background(), "account", guard.Subject{Account: account})
	if err != nil {
		t.Fatal(err)
	}
	failures := map[string]bool{}
	for _, r := range g.cfg.Rules {
		failures[r.Name] = r.Count == guard.CountFailures
	}
	out := map[string]int64{}
	for _, s := range st {
		if failures[s.Rule] {
			out[s.Rule] = s.Remaining
		}
	}
	if len(out) == 0 {
		t.Fatal("no failure-counting rule keyed on the account: the check would see nothing")
	}
	return out
}

// templateDefaults are the template parameters' defaults.
func templateDefaults(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("python3", filepath.Join(root, "tests", "deploy", "translate.py"), filepath.Join(root, "template.yaml")).Output()
	if err != nil {
		t.Fatal(err)
	}
	var tmpl struct {
		Parameters map[string]struct{ Default any }
	}
	if err := json.Unmarshal(out, &tmpl); err != nil {
		t.Fatal(err)
	}
	d := map[string]string{}
	for name, p := range tmpl.Parameters {
		switch v := p.Default.(type) {
		case nil:
		case float64:
			d[name] = strconv.FormatFloat(v, 'f', -1, 64)
		case []any:
			var parts []string
			for _, x := range v {
				parts = append(parts, fmt.Sprint(x))
			}
			d[name] = strings.Join(parts, ",")
		default:
			d[name] = fmt.Sprint(v)
		}
	}
	return d
}

// functionDir is the functions/ folder make build-<logicalID> builds.
func functionDir(t *testing.T, logicalID string) string {
	t.Helper()
	cmd := exec.Command("make", "-n", "--no-print-directory", "build-"+logicalID, "ARTIFACTS_DIR=/artifacts")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	i := strings.Index(string(out), "./functions/")
	if err != nil || i < 0 {
		t.Fatalf("make build-%s: %v %s", logicalID, err, out)
	}
	return strings.Fields(string(out)[i+len("./functions/"):])[0]
}

// samplesByFile is every sample event (relative to events/) and the
// function that answers it.
func samplesByFile() map[string]string {
	out := map[string]string{}
	for f, s := range samples {
		out[f] = s.fn
	}
	for f, s := range triggerSamples {
		out["cognito/"+f] = s.fn
	}
	return out
}

func samplesAnswer(file string) struct {
	fn     string
	status int
	check  func(t *testing.T, body map[string]any)
} {
	return samples[file]
}

// withUser is the sample event in file for another user name.
func withUser(t *testing.T, file, user string) []byte {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	ev["userName"] = user
	b, _ := json.Marshal(ev)
	return b
}

// TestTheEmulatorsFirstDurationHoldsTheInit: BenchmarkInit reads a
// bootstrap's init from the emulator's INIT REPORT log line and its cold
// start from the first invocation's Duration, because the REPORT line's
// own Init Duration does not wait for the bootstrap: a bootstrap whose
// init takes 300 ms shows them in its INIT REPORT and in its first
// invocation's Duration (and only there), whatever the REPORT line says
// of its init.
func TestTheEmulatorsFirstDurationHoldsTheInit(t *testing.T) {
	const slow = 300 * time.Millisecond
	dir := t.TempDir()
	rie := buildRIE(t, dir)
	exe := filepath.Join(dir, "bootstrap")
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", exe, "./testdata/slowinit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/slowinit: %v\n%s", err, out)
	}
	e := startEmulated(t, rie, exe, []string{"PATH=/usr/bin:/bin", "SLOW_INIT=" + slow.String()})
	ids := []string{"cold", "warm-1", "warm-2"}
	for _, id := range ids {
		if body, isErr := e.invoke(t, id, []byte(`{"n":1}`)); isErr || string(body) != `{"n":1}` {
			t.Fatalf("%s: %s", id, body)
		}
	}
	rs := e.reports(t, ids)
	init := e.initReport(t)
	if init < float64(slow.Milliseconds()) || init > rs[0].duration {
		t.Errorf("INIT REPORT %.2f ms, the first Duration %.2f ms: not the bootstrap's %v of init within the first Duration", init, rs[0].duration, slow)
	}
	if rs[0].duration < float64(slow.Milliseconds()) {
		t.Errorf("the first invocation's Duration %.2f ms holds less than the bootstrap's %v of init", rs[0].duration, slow)
	}
	for i, r := range rs[1:] {
		if r.duration >= float64(slow.Milliseconds()) || r.init != 0 {
			t.Errorf("%s: Duration %.2f ms, Init Duration %.2f ms: a warm invocation paid the init", ids[i+1], r.duration, r.init)
		}
	}
	t.Logf("the REPORT line's Init Duration %.2f ms, INIT REPORT %.2f ms, the first Duration %.2f ms, then %.2f and %.2f ms", rs[0].init, init, rs[0].duration, rs[1].duration, rs[2].duration)
}
