package lambdaapp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// stack is a Redis and a local AWS endpoint with the secrets and the
// config parameter a stack has, and the environment of its functions.
type stack struct {
	aws *awsfake.Server
	env map[string]string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	aws := awsfake.New()
	t.Cleanup(aws.Close)
	aws.SetSecret("hash", strings.Repeat("h", 48))
	aws.SetSecret("signing", strings.Repeat("a", 64))
	aws.SetParameter("/cfg", "otp: {ttl: 5m}\n")
	return &stack{aws: aws, env: map[string]string{
		"REDIS_URL": "redis://" + rs.Addr, "GUARD_CONFIG_PARAM": "/cfg", "GUARD_HASH_SECRET_ID": "hash",
		"GUARD_SIGNING_SECRET_ID": "signing", "CONFIG_REFRESH": "1s", "KEY_REFRESH": "1s", "AWS_REGION": "us-east-1", "STACK_NAME": "test",
		"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_ENDPOINT_URL": aws.URL,
	}}
}

func (s *stack) getenv(k string) string { return s.env[k] }

func serve(h http.Handler, method, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

// settle waits for the refreshes an invocation started to end.
func settle(rt *runtime) {
	for deadline := time.Now().Add(30 * time.Second); (rt.cfgSched.running.Load() || rt.keySched.running.Load()) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRefreshInPlace: a warm container reads the config and the signing
// key's versions again; a bad document is rejected (logged, counted as
// ConfigRejected) and the last good one stays, while a key rotation
// still goes through; a good document then takes effect. The JWKS serves
// the previous key next to the current one.
func TestRefreshInPlace(t *testing.T) {
	st := newStack(t)
	var stdout, stderr testutil.Buffer
	h, err := Init(context.Background(), Jwks, Parts{}, st.getenv, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	rt := h.(*runtime)
	keys := func() int {
		var v struct{ Keys []any }
		_ = json.Unmarshal(serve(h, http.MethodGet, "/.well-known/jwks.json").Body.Bytes(), &v)
		return len(v.Keys)
	}
	// refreshed waits out a period (plus its jitter), then lets an
	// invocation start the refreshes and waits for them.
	refreshed := func() {
		time.Sleep(1600 * time.Millisecond)
		keys()
		settle(rt)
	}
	if n := keys(); n != 1 || rt.app.Config().OTP.TTL != 5*time.Minute {
		t.Fatalf("at start: %d keys, ttl %s", n, rt.app.Config().OTP.TTL)
	}
	// A rotation (the old key becomes AWSPREVIOUS) and a bad document.
	st.aws.SetSecretStage("signing", "AWSPREVIOUS", strings.Repeat("a", 64))
	st.aws.SetSecret("signing", strings.Repeat("b", 64))
	st.aws.SetParameter("/cfg", "otp: {ttl: banana}\n")
	refreshed()
	if !strings.Contains(stdout.String(), `"ConfigRejected":1`) || !strings.Contains(stderr.String(), "config refresh rejected") {
		t.Errorf("the bad document was not rejected visibly:\n%s\n%s", stdout.String(), stderr.String())
	}
	if rt.app.Config().OTP.TTL != 5*time.Minute {
		t.Errorf("the last good config did not stay: ttl %s", rt.app.Config().OTP.TTL)
	}
	if n := keys(); n != 2 {
		t.Errorf("after the rotation the JWKS has %d keys, want the current and the previous", n)
	}
	st.aws.SetParameter("/cfg", "otp: {ttl: 7m}\n")
	refreshed()
	if rt.app.Config().OTP.TTL != 7*time.Minute {
		t.Errorf("a good document did not take effect: ttl %s", rt.app.Config().OTP.TTL)
	}
	// A refresh of the keys is one DescribeSecret; each version's value
	// is read once.
	if got := st.aws.CallsOf("secretsmanager:GetSecretValue"); got != 2 {
		t.Errorf("%d GetSecretValue calls for two versions of the signing key", got)
	}
}

// TestConfigIsReadOncePerPeriodAtAnyConcurrency: 40 containers of one
// stack, started together and invoked over four refresh periods, read the
// config parameter about once per period between them (through Redis),
// where each reading it would make 40 a period; SSM limited to 10 reads
// a second (it allows 40 by default) throttles none of them into a
// failure.
func TestConfigIsReadOncePerPeriodAtAnyConcurrency(t *testing.T) {
	st := newStack(t)
	st.aws.Limit("ssm:GetParameter", 10)
	const n = 40
	hs := make([]http.Handler, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var out, log testutil.Buffer
			hs[i], errs[i] = Init(context.Background(), Verify, Parts{}, st.getenv, &out, &log)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("container %d: %v", i, err)
		}
	}
	began := time.Now()
	for time.Since(began) < 4*time.Second {
		for _, h := range hs {
			serve(h, http.MethodGet, "/healthz")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, h := range hs {
		settle(h.(*runtime))
	}
	calls := st.aws.CallsOf("ssm:GetParameter")
	t.Logf("40 containers, 4s at CONFIG_REFRESH=1s: %d GetParameter calls (each container reading it would make about %d)", calls, n*(1+4))
	if calls > 8 {
		t.Errorf("%d GetParameter calls: the config is not shared", calls)
	}
	for i, h := range hs {
		if h.(*runtime).app.Config().OTP.TTL != 5*time.Minute {
			t.Errorf("container %d does not run the parameter's config", i)
		}
	}
}

// TestAnInitFailureServesNotReadyThenRecovers: a function whose role may
// not read the config parameter (the IAM answer to a wrong name) does not
// exit: it answers 503 not_ready naming the dependency, and serves as
// soon as the parameter can be read.
func TestAnInitFailureServesNotReadyThenRecovers(t *testing.T) {
	st := newStack(t)
	st.aws.Deny("ssm:GetParameter", "/cfg", true)
	var stdout, stderr testutil.Buffer
	h := Start(context.Background(), Verify, Parts{}, st.getenv, &stdout, &stderr)
	w := serve(h, http.MethodGet, "/healthz")
	var p struct{ Code, Detail string }
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	if w.Code != http.StatusServiceUnavailable || p.Code != "not_ready" || !strings.Contains(p.Detail, "the config parameter") ||
		strings.Contains(w.Body.String(), "/cfg") || strings.Contains(w.Body.String(), "AccessDenied") {
		t.Fatalf("with the parameter denied: %d %s", w.Code, w.Body.String())
	}
	if !strings.Contains(stderr.String(), "AccessDeniedException") {
		t.Errorf("the log does not say why: %s", stderr.String())
	}
	st.aws.Deny("ssm:GetParameter", "/cfg", false)
	time.Sleep(1100 * time.Millisecond) // the first pause before a new try
	if w := serve(h, http.MethodGet, "/healthz"); w.Code != http.StatusOK {
		t.Fatalf("once the parameter can be read: %d %s", w.Code, w.Body.String())
	}
	if !strings.Contains(stdout.String(), `"NotReady":1`) {
		t.Errorf("the 503 was not counted: %s", stdout.String())
	}
}

// TestEachFunctionReadsOnlyItsSecrets: only the functions that sign or
// publish keys read the signing secret, only those that hash read the
// key-hashing secret; denied the others, every function starts.
func TestEachFunctionReadsOnlyItsSecrets(t *testing.T) {
	for _, fn := range []Function{Send, Verify, Jwks, Health, Login, Signup, Backend} {
		t.Run(fn.Name, func(t *testing.T) {
			st := newStack(t)
			st.aws.Deny("secretsmanager:GetSecretValue", "signing", !fn.Signs)
			st.aws.Deny("secretsmanager:DescribeSecret", "signing", !fn.Signs)
			st.aws.Deny("secretsmanager:GetSecretValue", "hash", !fn.Hashes)
			// Inert parts: what is checked is which secrets init reads.
			parts := Parts{
				Senders: func(func(string) string, aws.Config) (func(queue.Host) (message.Sender, error), error) {
					return func(queue.Host) (message.Sender, error) { return nil, nil }, nil
				},
				Auth: func(func(string) string, bool, func() (string, error)) (api.Authenticator, func() error, error) {
					return nil, func() error { return nil }, nil
				},
			}
			var out, log testutil.Buffer
			if _, err := Init(context.Background(), fn, parts, st.getenv, &out, &log); err != nil {
				t.Fatalf("init: %v", err)
			}
			if got := st.aws.CallsOf("secretsmanager:DescribeSecret") > 0; got != fn.Signs {
				t.Errorf("read the signing key: %v", got)
			}
		})
	}
}
