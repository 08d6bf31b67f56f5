package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// docs/contract.md §6 over HTTP on the built server: step-up codes on
// challenged logins, CAPTCHAs on challenged sends and signups.

// challengeEverything challenges every login after the first of the
// hour (the global rule's one unit), whatever the signal: the tests
// drive the flow, the simulator the tuning.
const challengeEverything = behindProxy + `otp: {ttl: 3s}
rules:
  - {name: stepup, action: login, key: [global], limit: 1, window: 1h, mode: challenge}
  - {name: login-per-account-ip, action: login, key: [account, ip], count: failures, limit: 50, window: 15m}
`

func (s *server) challenge(t *testing.T, session, code string) reply {
	t.Helper()
	return s.post(t, "/v1/login/challenge", map[string]string{"session": session, "code": code}, "X-Forwarded-For", "198.51.100.9")
}

func TestAChallengedLoginIsReleasedOnceForItsCode(t *testing.T) {
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			s := start(t, b.redisURL, challengeEverything)
			s.register(t, "owner@example.com", goodPassword, "198.51.100.1")
			s.register(t, "other@example.com", goodPassword, "198.51.100.2")
			if r := s.login(t, "other@example.com", goodPassword, "198.51.100.2"); r.status != 200 || r.str("token") == "" {
				t.Fatalf("the hour's first login (not challenged): %d %s", r.status, r.raw)
			}
			// A wrong password that trips the rule is still just a 401.
			if r := s.login(t, "owner@example.com", "not the password", "198.51.100.1"); r.status != 401 || r.str("code") != "invalid_credentials" {
				t.Fatalf("a wrong password, challenged: %d %s", r.status, r.raw)
			}
			r := s.login(t, "owner@example.com", goodPassword, "198.51.100.1")
			session := r.str("session")
			if r.status != 200 || r.str("status") != "challenge" || r.str("challengeName") != "EMAIL_OTP" || session == "" ||
				r.str("to") != "o***@example.com" || r.str("token") != "" {
				t.Fatalf("a right password, challenged: %d %s", r.status, r.raw)
			}
			code := s.lastCode(t, "owner@example.com")
			// The held result is not readable in Redis.
			held := heldBlobs(t, b.client())
			if len(held) != 1 {
				t.Fatalf("%d held logins in Redis, want 1", len(held))
			}
			for _, v := range held {
				for _, clear := range []string{"owner@example.com", "authenticated", "Token", "VerifiedEmail", `"a"`} {
					if strings.Contains(v, clear) {
						t.Fatalf("the held login shows %q: %q", clear, v)
					}
				}
			}
			// Another account's session with this code, a wrong code: 401.
			other := s.login(t, "other@example.com", goodPassword, "198.51.100.2")
			if other.str("session") == "" {
				t.Fatalf("the other account's login: %d %s", other.status, other.raw)
			}
			for name, try := range map[string][2]string{
				"another account's session": {other.str("session"), code},
				"a wrong code":              {session, wrongCode(code)},
				"a made-up session":         {"AAAAAAAAAAAAAAAAAAAAAA", code},
			} {
				if r := s.challenge(t, try[0], try[1]); r.status != 401 || r.str("code") != "invalid_credentials" {
					t.Errorf("%s: %d %s", name, r.status, r.raw)
				}
			}
			// 20 parallel answers with the right code: one success.
			var ok, refused atomic.Int32
			var got reply
			var mu sync.Mutex
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					r := s.challenge(t, session, code)
					switch r.status {
					case 200:
						ok.Add(1)
						mu.Lock()
						got = r
						mu.Unlock()
					case 401:
						refused.Add(1)
					}
				})
			}
			wg.Wait()
			if ok.Load() != 1 || refused.Load() != 19 {
				t.Fatalf("20 parallel answers: %d released, %d refused", ok.Load(), refused.Load())
			}
			if got.str("status") != "authenticated" || got.str("token") == "" || got.str("deviceToken") == "" {
				t.Fatalf("the released result: %s", got.raw)
			}
			if r := s.challenge(t, session, code); r.status != 401 {
				t.Fatalf("a replayed session: %d %s", r.status, r.raw)
			}
			if n := len(heldBlobs(t, b.client())); n != 1 { // the other account's is left
				t.Errorf("%d held logins after the release, want the other account's only", n)
			}
			// An expired session (otp.ttl 3s).
			r = s.login(t, "owner@example.com", goodPassword, "198.51.100.1")
			time.Sleep(3500 * time.Millisecond)
			if r := s.challenge(t, r.str("session"), s.lastCode(t, "owner@example.com")); r.status != 401 {
				t.Fatalf("an expired session: %d %s", r.status, r.raw)
			}
		})
	}
}

// heldBlobs are the values of the held logins (og:{…}:ch).
func heldBlobs(t *testing.T, rdb redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	err := eachMaster(ctx, rdb, func(c *redis.Client) error {
		keys, err := c.Keys(ctx, "og:*:ch").Result()
		for _, k := range keys {
			out[k] = c.Get(ctx, k).Val()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wrongCode(code string) string {
	b := []byte(code)
	b[0] = '0' + (b[0]-'0'+1)%10
	return string(b)
}

// siteverify is a local CAPTCHA provider: tokens good-* succeed (once, as
// a provider would), bad fails, slow* answers after 2s, broken answers 500.
type siteverify struct {
	srv   *httptest.Server
	seen  sync.Map
	calls atomic.Int32
	last  atomic.Value // the last form
}

func newSiteverify(t *testing.T) *siteverify {
	sv := &siteverify{}
	sv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sv.calls.Add(1)
		_ = r.ParseForm()
		sv.last.Store(r.PostForm.Encode())
		tok := r.PostForm.Get("response")
		if r.PostForm.Get("secret") != "captcha-secret-for-tests" {
			json.NewEncoder(w).Encode(map[string]any{"success": false, "error-codes": []string{"invalid-input-secret"}})
			return
		}
		switch {
		case strings.HasPrefix(tok, "slow"):
			time.Sleep(2 * time.Second)
		case tok == "broken":
			w.WriteHeader(500)
			return
		case strings.HasPrefix(tok, "good-"):
			if _, dup := sv.seen.LoadOrStore(tok, true); !dup {
				json.NewEncoder(w).Encode(map[string]any{"success": true, "hostname": "app.example.com"})
				return
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"success": false, "error-codes": []string{"invalid-input-response"}})
	}))
	t.Cleanup(sv.srv.Close)
	return sv
}

func TestCaptchaOnChallengedSendsAndSignups(t *testing.T) {
	sv := newSiteverify(t)
	cfg := fmt.Sprintf(`network: {trustedProxies: [127.0.0.0/8]}
challenge: {captcha: {provider: turnstile, verifyUrl: %q, siteKey: site-key-for-tests, timeout: 300ms}}
rules:
  - {name: send-challenge, action: otp.send, key: [global], limit: 1, window: 1h, mode: challenge}
  - {name: signup-challenge, action: signup, key: [global], limit: 1, window: 1h, mode: challenge, onStoreError: allow}
`, sv.srv.URL)
	s := start(t, backends()[0].redisURL, cfg, "CAPTCHA_SECRET=captcha-secret-for-tests")
	send := func(to, token string) reply {
		body := map[string]string{"channel": "email", "to": to, "purpose": "login"}
		if token != "" {
			body["captchaToken"] = token
		}
		return s.post(t, "/v1/otp/send", body, "X-Forwarded-For", "198.51.100.50")
	}
	if r := send("a@example.com", ""); r.status != 202 {
		t.Fatalf("the first send: %d %s", r.status, r.raw)
	}
	r := send("b@example.com", "")
	if r.status != 403 || r.str("code") != "challenge_required" || r.str("challenge") != "captcha" ||
		r.str("siteKey") != "site-key-for-tests" || r.str("provider") != "turnstile" {
		t.Fatalf("a challenged send without a token: %d %s", r.status, r.raw)
	}
	if r := send("b@example.com", "good-1"); r.status != 202 {
		t.Fatalf("with a solved CAPTCHA: %d %s", r.status, r.raw)
	}
	if form, _ := sv.last.Load().(string); !strings.Contains(form, "remoteip=198.51.100.50") || !strings.Contains(form, "secret=captcha-secret-for-tests") {
		t.Errorf("the siteverify call: %s", form)
	}
	calls := sv.calls.Load()
	if r := send("c@example.com", "good-1"); r.status != 403 || r.str("code") != "challenge_required" {
		t.Fatalf("a replayed token: %d %s", r.status, r.raw)
	}
	if sv.calls.Load() != calls {
		t.Error("a replayed token reached the provider: it should be refused before")
	}
	if r := send("c@example.com", "bad"); r.status != 403 {
		t.Fatalf("success: false: %d %s", r.status, r.raw)
	}
	// The provider fails: send-challenge denies on store errors (the
	// default for sends), signup-challenge allows.
	for _, tok := range []string{"slow-1", "broken"} {
		if r := send("c@example.com", tok); r.status != 503 || r.str("code") != "captcha_unavailable" {
			t.Fatalf("a provider that %s: %d %s", tok, r.status, r.raw)
		}
	}
	if n := len(s.messages(t)); n != 2 {
		t.Errorf("%d codes sent, want 2 (the first send and the solved one)", n)
	}
	signup := func(email, token string) reply {
		body := map[string]string{"email": email, "password": goodPassword}
		if token != "" {
			body["captchaToken"] = token
		}
		return s.post(t, "/v1/signup", body, "X-Forwarded-For", "198.51.100.51")
	}
	if r := signup("s1@example.com", ""); r.status != 202 {
		t.Fatalf("the first signup: %d %s", r.status, r.raw)
	}
	if r := signup("s2@example.com", ""); r.status != 403 {
		t.Fatalf("a challenged signup: %d %s", r.status, r.raw)
	}
	if r := signup("s2@example.com", "slow-2"); r.status != 202 {
		t.Fatalf("a challenged signup while the provider times out (onStoreError: allow): %d %s", r.status, r.raw)
	}
}
