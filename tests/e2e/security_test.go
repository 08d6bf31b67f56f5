package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/token"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// Regression tests of holes an outside probe found in the OTP
// flow. Each is named for its defect and fails on the code before the fix.

// Defect 1: a code approves only the exact address it was delivered to;
// the token's sub is that address. Counting still merges the variants.
func TestTokenBindsTheDeliveredAddress(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			s := start(t, b.redisURL, loaded)
			for _, c := range []struct{ sent, other, sameMailbox string }{
				{"x+tag@corp.example", "x@corp.example", "x+tag@CORP.EXAMPLE"},
				{"X.Y@gmail.com", "xy@gmail.com", " X.Y@GMAIL.com "},
			} {
				if r := s.send(t, "email", c.sent, "login"); r.status != http.StatusAccepted {
					t.Fatalf("send to %s: %d %s", c.sent, r.status, r.raw)
				}
				code := s.lastCode(t, delivered(c.sent))
				// The right code for a variant of the address: refused.
				if r := s.verify(t, c.other, "login", code); r.status != http.StatusUnprocessableEntity || r.str("code") != "invalid_code" {
					t.Fatalf("%s's code verified for %s: %d %s", c.sent, c.other, r.status, r.raw)
				}
				// For the address it went to (domain case and spaces aside): approved.
				r := s.verify(t, c.sameMailbox, "login", code)
				if r.status != http.StatusOK {
					t.Fatalf("%s's code for %q: %d %s", c.sent, c.sameMailbox, r.status, r.raw)
				}
				claims, err := token.Verify(jwks(t, s), r.str("token"), "otpguard", token.OTP)
				if err != nil {
					t.Fatal(err)
				}
				if claims.Subject != delivered(c.sent) {
					t.Errorf("token sub %q, want the delivered address %q", claims.Subject, delivered(c.sent))
				}
			}
			// The variants still count as one destination for the limits:
			// x+tag had one of the two sends a minute, x takes the other.
			s.send(t, "email", "x@corp.example", "login")
			if r := s.send(t, "email", "X+other@corp.example", "login"); r.status != http.StatusTooManyRequests {
				t.Errorf("a third send to variants of one mailbox within a minute: %d, want 429", r.status)
			}
		})
	}
}

// Defect 2: instances on one Redis must share the secrets, or limits split
// per instance: without them, start-up fails naming the variable.
func TestInstancesOnOneRedisShareTheirSecrets(t *testing.T) {
	url := "redis://" + single.Addr
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_URL=" + url}, "GUARD_SECRET is required with REDIS_URL"},
		{[]string{"REDIS_URL=" + url, "GUARD_SECRET=" + testutil.RandomSecret()}, "GUARD_SIGNING_KEY is required with REDIS_URL"},
	} {
		cmd := exec.Command(binary)
		cmd.Env = append([]string{"GUARD_ADDR=127.0.0.1:0", "PATH=/usr/bin:/bin"}, c.env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("start with %v: %v %s; want a failure naming %q", c.env[1:], err, out, c.want)
		}
	}
	// With shared secrets two instances are one guard: 4 sends through
	// both admit the limit of 2, a code sent through one verifies through
	// the other, and its token checks against either's JWKS.
	flush(t, single.Client())
	shared := []string{"GUARD_SECRET=" + testutil.RandomSecret(), "GUARD_SIGNING_KEY=" + testutil.RandomSecret()}
	a := start(t, url, loaded, shared...)
	b := start(t, url, loaded, shared...)
	accepted := 0
	for i, s := range []*server{a, b, a, b} {
		if r := s.send(t, "email", "shared@example.com", "signup"); r.status == http.StatusAccepted {
			accepted++
		} else if r.status != http.StatusTooManyRequests {
			t.Fatalf("send %d: %d %s", i, r.status, r.raw)
		}
	}
	if accepted != 2 {
		t.Errorf("two instances admitted %d sends against a limit of 2", accepted)
	}
	code := b.lastCode(t, "shared@example.com")
	r := a.verify(t, "shared@example.com", "signup", code)
	if r.status != http.StatusOK {
		t.Fatalf("a code sent through one instance, verified through the other: %d %s", r.status, r.raw)
	}
	if _, err := token.Verify(jwks(t, b), r.str("token"), "otpguard", token.OTP); err != nil {
		t.Errorf("a token of one instance against the other's JWKS: %v", err)
	}
}

// Defect 3: verify failures are counted race-safely: 100 parallel wrong
// codes for one destination are admitted exactly the failure limit.
func TestParallelWrongVerifiesAdmitExactlyTheFailureLimit(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			// A generous store.timeout: 100 connections dialed at once on a
			// shared 2-core machine can take longer than 50ms, and this
			// test is about exact admission, not the latency bound.
			s := start(t, b.redisURL, `
otp: {maxAttempts: 100}
store: {timeout: 10s}
rules:
  - {name: send, action: otp.send, key: [destination], limit: 5, window: 1m}
  - {name: verify-failures, action: otp.verify, key: [destination], count: failures, limit: 10, window: 1h}
`)
			to := "race@example.com"
			if r := s.send(t, "email", to, "login"); r.status != http.StatusAccepted {
				t.Fatalf("send: %d %s", r.status, r.raw)
			}
			code := s.lastCode(t, to)
			var guesses []string
			for n := 0; len(guesses) < 100; n++ {
				if g := fmt.Sprintf("%06d", n*7919%1000000); g != code {
					guesses = append(guesses, g)
				}
			}
			var wg sync.WaitGroup
			replies := make([]reply, 100)
			for i := range replies {
				wg.Go(func() { replies[i] = s.verify(t, to, "login", guesses[i]) })
			}
			wg.Wait()
			counts := map[int]int{}
			for _, r := range replies {
				counts[r.status]++
			}
			if counts[422] != 10 || counts[429] != 90 {
				t.Fatalf("100 parallel wrong codes: %v; want exactly 10 × 422 and 90 × 429", counts)
			}
			if r := s.verify(t, to, "login", code); r.status != http.StatusTooManyRequests || r.str("rule") != "verify-failures" {
				t.Fatalf("the right code after the limit: %d %s", r.status, r.raw)
			}
		})
	}
}

// And a right code gives its attempt back: 9 failures then the right
// code leaves the budget at 9, not 10.
func TestARightCodeGivesItsAttemptBack(t *testing.T) {
	s := start(t, "redis://"+single.Addr, `
rules:
  - {name: send, action: otp.send, key: [destination], limit: 5, window: 1m}
  - {name: verify-failures, action: otp.verify, key: [destination], count: failures, limit: 3, window: 1h}
`)
	to := "giveback@example.com"
	for range 3 {
		s.send(t, "email", to, "login")
		if r := s.verify(t, to, "login", s.lastCode(t, to)); r.status != http.StatusOK {
			t.Fatalf("right code: %d %s", r.status, r.raw)
		}
	}
	s.send(t, "email", to, "login")
	code := s.lastCode(t, to)
	for i := range 2 {
		if r := s.verify(t, to, "login", wrong(code, i)); r.status != http.StatusUnprocessableEntity {
			t.Fatalf("wrong %d: %d %s", i, r.status, r.raw)
		}
	}
	if r := s.verify(t, to, "login", code); r.status != http.StatusOK {
		t.Fatalf("after 3 successes and 2 failures (limit 3): %d %s", r.status, r.raw)
	}
}

// Defect 4: a page on another origin cannot make browsers post: bodies
// must be application/json (415 otherwise, nothing sent), preflights pass
// only for network.allowedOrigins, and null is not a string.
func TestOnlyJSONFromAllowedOrigins(t *testing.T) {
	s := start(t, "redis://"+single.Addr, "network: {allowedOrigins: [\"https://app.example.com\"]}\n")
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/otp/send", strings.NewReader(`{"channel":"email","to":"csrf@example.com","purpose":"signup"}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		req.Header.Set("Origin", "https://evil.example")
		resp, err := s.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(body), `"code":"unsupported_media_type"`) ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("Content-Type %q: %d %s", ct, resp.StatusCode, body)
		}
	}
	if n := len(s.messages(t)); n != 0 {
		t.Errorf("%d messages sent for non-JSON posts", n)
	}
	preflight := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, s.url+"/v1/otp/send", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type")
		resp, err := s.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := preflight("https://app.example.com"); r.StatusCode != http.StatusNoContent || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")), "content-type") ||
		!strings.Contains(strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")), "x-device-token") ||
		r.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Errorf("preflight from the allowed origin: %d %v", r.StatusCode, r.Header)
	}
	if r := preflight("https://evil.example"); r.StatusCode != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin: %d %v", r.StatusCode, r.Header)
	}
	r := s.send(t, "email", "cors@example.com", "signup", "Origin", "https://app.example.com")
	if r.status != http.StatusAccepted || r.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("a JSON post from the allowed origin: %d %v", r.status, r.header)
	}
	r = s.do(t, http.MethodPost, "/v1/otp/send", `{"channel":"email","to":"null@example.com","purpose":"signup","locale":null}`)
	errs, _ := r.body["errors"].(map[string]any)
	if r.status != http.StatusBadRequest || errs["locale"] == nil {
		t.Errorf(`"locale": null: %d %s, want a 400 naming locale`, r.status, r.raw)
	}
}

// Defect 6: guesses at an address with no pending code count against the
// IP, not the address: strangers cannot lock its owner out.
func TestStrangersCannotLockAnAddress(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			s := start(t, b.redisURL, `
rules:
  - {name: send, action: otp.send, key: [destination], limit: 5, window: 1m}
  - {name: verify-failures, action: otp.verify, key: [destination], count: failures, limit: 10, window: 1h}
  - {name: verify-failures-per-ip, action: otp.verify, key: [ip], count: failures, limit: 15, window: 1h}
`)
			to := "owner@example.com"
			for i := range 15 {
				if r := s.verify(t, to, "login", fmt.Sprintf("%06d", i)); r.status != http.StatusUnprocessableEntity {
					t.Fatalf("stray guess %d: %d %s", i, r.status, r.raw)
				}
			}
			// The IP has used its failures...
			if r := s.verify(t, to, "login", "123456"); r.status != http.StatusTooManyRequests || r.str("rule") != "verify-failures-per-ip" {
				t.Fatalf("the 16th stray guess from one IP: %d %s, want 429 by verify-failures-per-ip", r.status, r.raw)
			}
			// ...the owner, from another IP, has lost nothing.
			owner := start(t, b.redisURL, "network: {trustedProxies: [127.0.0.0/8]}\n"+`
rules:
  - {name: send, action: otp.send, key: [destination], limit: 5, window: 1m}
  - {name: verify-failures, action: otp.verify, key: [destination], count: failures, limit: 10, window: 1h}
  - {name: verify-failures-per-ip, action: otp.verify, key: [ip], count: failures, limit: 15, window: 1h}
`, sharedSecrets(s)...)
			owner.send(t, "email", to, "login", "X-Forwarded-For", "198.51.100.7")
			code := owner.lastCode(t, to)
			r := owner.post(t, "/v1/otp/verify", map[string]string{"to": to, "purpose": "login", "code": code}, "X-Forwarded-For", "198.51.100.7")
			if r.status != http.StatusOK {
				t.Fatalf("the owner's right code after 15 stray guesses: %d %s", r.status, r.raw)
			}
		})
	}
}

// Defect 7: resendIn describes the configuration, not the address's
// history: the same after a first send as after someone else's.
func TestResendInTellsNothingAboutOtherSenders(t *testing.T) {
	s := start(t, "redis://"+single.Addr, loaded)
	first := s.send(t, "email", "quiet@example.com", "signup")
	other := s.send(t, "email", "busy@example.com", "signup")
	second := s.send(t, "email", "busy@example.com", "signup") // someone else sent just before
	for _, r := range []reply{first, other, second} {
		if r.status != http.StatusAccepted || r.body["resendIn"] != 30.0 {
			t.Errorf("resendIn: %d %s, want 30 (1m / 2 of otp-send-per-destination) every time", r.status, r.raw)
		}
	}
}

// Defect 7: every answer is problem+json, even to requests net/http
// refuses itself, and unclean paths are 404, not redirects.
func TestMalformedHTTPGetsProblems(t *testing.T) {
	s := start(t, "", loaded)
	host := strings.TrimPrefix(s.url, "http://")
	raw := func(req string) (int, http.Header, string) {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", req[:min(len(req), 60)], err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	huge := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n"
	for _, c := range []struct {
		name, req string
		status    int
		code      string
	}{
		{"huge headers", huge, 431, "headers_too_large"},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not_found"},
		{"negative Content-Length", "POST /v1/otp/send HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n", 400, ""},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, ""},
		{"unknown transfer coding", "POST /v1/otp/send HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: zip\r\n\r\n", 501, ""},
		{"double slash", "POST //v1/otp/send HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", 404, ""},
		{"dot segment", "GET /v1/../healthz HTTP/1.1\r\nHost: x\r\n\r\n", 404, ""},
		{"trailing slash", "GET /healthz/ HTTP/1.1\r\nHost: x\r\n\r\n", 404, ""},
	} {
		status, h, body := raw(c.req)
		var p map[string]any
		if status != c.status || h.Get("Content-Type") != "application/problem+json" || json.Unmarshal([]byte(body), &p) != nil ||
			p["status"] != float64(c.status) || p["code"] == nil || (c.code != "" && p["code"] != c.code) || h.Get("Location") != "" {
			t.Errorf("%s: %d %v %q; want %d problem+json (%s), no redirect", c.name, status, h, body, c.status, c.code)
		}
	}
	// A body that comes too slowly is answered 408, not dropped.
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	_, _ = io.WriteString(c, "POST /v1/otp/send HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"channel\":")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a slow body: no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), `"request_timeout"`) {
		t.Errorf("a slow body: %d %v %s", resp.StatusCode, resp.Header, b)
	}
}

// Defect 7: go-redis's own messages during an outage go into the JSON log,
// not as plain lines on stderr.
func TestRedisClientMessagesAreJSON(t *testing.T) {
	s := start(t, "redis://127.0.0.1:1", "")
	for range 3 {
		s.send(t, "email", "down@example.com", "signup")
	}
	time.Sleep(100 * time.Millisecond)
	for line := range strings.Lines(s.logs.String()) {
		if !json.Valid([]byte(line)) {
			t.Errorf("a log line that is not JSON: %q", line)
		}
	}
	if !strings.Contains(s.logs.String(), "store_unavailable") {
		t.Errorf("no store_unavailable in the logs:\n%s", s.logs.String())
	}
}

// delivered is the address mail goes to: as typed, domain lower-cased.
func delivered(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	return addr[:at] + "@" + strings.ToLower(addr[at+1:])
}

func jwks(t *testing.T, s *server) token.JWKS {
	t.Helper()
	r := s.do(t, http.MethodGet, "/.well-known/jwks.json", "")
	var set token.JWKS
	if err := json.Unmarshal([]byte(r.raw), &set); err != nil || r.status != http.StatusOK {
		t.Fatalf("jwks: %d %s %v", r.status, r.raw, err)
	}
	return set
}

// sharedSecrets is the environment that makes a new server share s's
// secrets (one guard on one Redis).
func sharedSecrets(s *server) []string {
	return []string{"GUARD_SECRET=" + s.env("GUARD_SECRET"), "GUARD_SIGNING_KEY=" + s.env("GUARD_SIGNING_KEY")}
}
