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

	"github.com/otpguard/otpguard/internal/awsfake"
	"github.com/otpguard/otpguard/internal/redistest"
)

type buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *buffer) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *buffer) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

// TestRefreshInPlace: a warm container reads the config and the signing
// key again every CONFIG_REFRESH; a bad document is rejected (logged,
// counted as ConfigRejected) and the last good one stays, while a key
// rotation still goes through; a good document then takes effect. The
// JWKS serves the previous key next to the current one.
func TestRefreshInPlace(t *testing.T) {
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	aws := awsfake.New()
	defer aws.Close()
	aws.SetSecret("hash", strings.Repeat("h", 48))
	aws.SetSecret("signing", strings.Repeat("a", 64))
	aws.SetParameter("/cfg", "otp: {ttl: 5m}\n")
	env := map[string]string{
		"REDIS_URL": "redis://" + rs.Addr, "GUARD_CONFIG_PARAM": "/cfg", "GUARD_HASH_SECRET_ID": "hash",
		"GUARD_SIGNING_SECRET_ID": "signing", "CONFIG_REFRESH": "1s", "AWS_REGION": "us-east-1", "STACK_NAME": "test",
		"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_ENDPOINT_URL": aws.URL,
	}
	var stdout, stderr buffer
	h, err := Init(context.Background(), Jwks, Parts{}, func(k string) string { return env[k] }, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	rt := h.(*runtime)
	keys := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/.well-known/jwks.json", nil))
		var v struct{ Keys []any }
		_ = json.Unmarshal(w.Body.Bytes(), &v)
		return len(v.Keys)
	}
	// refreshed waits for the refresh an invocation starts once the
	// interval is over.
	refreshed := func() {
		time.Sleep(1100 * time.Millisecond)
		keys() // this invocation starts the refresh
		for deadline := time.Now().Add(5 * time.Second); rt.refreshing.Load() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n := keys(); n != 1 || rt.app.Config().OTP.TTL != 5*time.Minute {
		t.Fatalf("at start: %d keys, ttl %s", n, rt.app.Config().OTP.TTL)
	}
	// A rotation (the old key becomes AWSPREVIOUS) and a bad document.
	aws.SetSecretStage("signing", "AWSPREVIOUS", strings.Repeat("a", 64))
	aws.SetSecret("signing", strings.Repeat("b", 64))
	aws.SetParameter("/cfg", "otp: {ttl: banana}\n")
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
	aws.SetParameter("/cfg", "otp: {ttl: 7m}\n")
	refreshed()
	if rt.app.Config().OTP.TTL != 7*time.Minute {
		t.Errorf("a good document did not take effect: ttl %s", rt.app.Config().OTP.TTL)
	}
}
