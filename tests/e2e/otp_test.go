package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/token"
)

// TestOTP runs every scenario against a single redis-server and again
// against a 3-master Redis Cluster.
func TestOTP(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Run("send, verify, token checks against the JWKS, reuse fails", func(t *testing.T) { sendVerify(t, b) })
			t.Run("50 parallel sends to one email in many spellings admit exactly 2", func(t *testing.T) { parallelSends(t, b) })
			t.Run("spoofed forwarding headers do not escape the per-IP rule", func(t *testing.T) { spoofedForwarding(t, b) })
			t.Run("5 wrong codes burn the code", func(t *testing.T) { burn(t, b) })
			t.Run("20 parallel verifies of the right code approve once", func(t *testing.T) { parallelVerifies(t, b) })
			t.Run("a resend invalidates the old code and keeps the failure count", func(t *testing.T) { resend(t, b) })
			t.Run("a code expires after otp.ttl", func(t *testing.T) { expiry(t, b) })
			t.Run("malformed requests get 400 or 413 and touch nothing", func(t *testing.T) { badInput(t, b) })
			t.Run("the code is in no log line and no Redis key or value", func(t *testing.T) { noLeak(t, b) })
		})
	}
}

func sendVerify(t *testing.T, b backend) {
	s := start(t, b.redisURL, loaded)
	r := s.send(t, "email", "Ann.Lee+news@Example.COM", "signup")
	if r.status != http.StatusAccepted || r.str("status") != "pending" || r.str("to") != "A***@example.com" || r.body["expiresIn"] != 600.0 {
		t.Fatalf("send: %d %s", r.status, r.raw)
	}
	code := s.lastCode(t, "Ann.Lee+news@example.com")
	if !regexp.MustCompile(`^[0-9]{6}$`).MatchString(code) {
		t.Fatalf("code %q is not 6 digits", code)
	}
	// The address as delivered: the domain's case does not matter, the
	// local part's does (another spelling is another mailbox).
	v := s.verify(t, "Ann.Lee+news@EXAMPLE.com", "signup", code)
	if v.status != http.StatusOK || v.str("status") != "approved" {
		t.Fatalf("verify: %d %s", v.status, v.raw)
	}

	jwks := s.do(t, http.MethodGet, "/.well-known/jwks.json", "")
	var set token.JWKS
	if err := json.Unmarshal([]byte(jwks.raw), &set); err != nil || jwks.status != 200 {
		t.Fatalf("jwks: %d %s %v", jwks.status, jwks.raw, err)
	}
	claims, err := token.Verify(set, v.str("token"), "otpguard", token.OTP)
	if err != nil {
		t.Fatalf("token does not verify against the JWKS: %v", err)
	}
	if claims.Subject != "Ann.Lee+news@example.com" || claims.Purpose != "signup" || claims.Channel != "email" || claims.ID == "" {
		t.Errorf("claims: %+v", claims)
	}
	if ttl := claims.ExpiresAt.Sub(claims.IssuedAt.Time); ttl != 5*time.Minute {
		t.Errorf("token lifetime %s, want 5m", ttl)
	}
	// A token signed by another key, or tampered with, does not verify.
	tampered := v.str("token")[:len(v.str("token"))-4] + "AAAA"
	if _, err := token.Verify(set, tampered, "otpguard", token.OTP); err == nil {
		t.Error("a tampered token verified")
	}

	again := s.verify(t, "Ann.Lee+news@example.com", "signup", code)
	if again.status != http.StatusUnprocessableEntity || again.str("code") != "invalid_code" {
		t.Fatalf("second verify of the same code: %d %s", again.status, again.raw)
	}
}

func parallelSends(t *testing.T, b backend) {
	// A generous store.timeout: the property is exact admission, and a
	// burst of 50 on a shared 2-core machine can exceed 50ms to Redis.
	s := start(t, b.redisURL, "store: {timeout: 10s}\n")
	spellings := []string{"victim@example.com", "Victim@Example.com", "VICTIM@EXAMPLE.COM", "victim+1@example.com",
		"Victim+promo@example.com", "victim+a+b@EXAMPLE.com", " victim@example.com ", "vIcTiM+x@ExAmPlE.cOm"}
	var wg sync.WaitGroup
	replies := make([]reply, 50)
	for i := range replies {
		wg.Go(func() { replies[i] = s.send(t, "email", spellings[i%len(spellings)], "login") })
	}
	wg.Wait()
	accepted := 0
	for _, r := range replies {
		switch r.status {
		case http.StatusAccepted:
			accepted++
		case http.StatusTooManyRequests:
			ra, err := strconv.Atoi(r.header.Get("Retry-After"))
			if err != nil || ra < 1 || ra > 60 || r.body["retryAfter"] != float64(ra) || r.str("rule") != "otp-send-per-destination" || r.str("code") != "rate_limited" {
				t.Errorf("429 without a proper Retry-After/retryAfter/rule: %v %s", r.header, r.raw)
			}
		default:
			t.Errorf("unexpected answer %d %s", r.status, r.raw)
		}
	}
	if accepted != 2 {
		t.Errorf("%d sends accepted, want exactly 2", accepted)
	}
	if n := len(s.messages(t)); n != 2 {
		t.Errorf("%d messages in the outbox, want 2", n)
	}
}

func spoofedForwarding(t *testing.T, b backend) {
	s := start(t, b.redisURL, loaded)
	accepted := 0
	var last reply
	for i := range 25 {
		// A different destination each time, so only the per-IP rule (20
		// an hour) can stop them; every request claims another client.
		fake := fmt.Sprintf("203.0.113.%d", i+1)
		last = s.send(t, "email", fmt.Sprintf("user%d@example.com", i), "signup",
			"X-Forwarded-For", fake, "X-Real-IP", fake, "Forwarded", "for="+fake, "True-Client-IP", fake, "CF-Connecting-IP", fake)
		if last.status == http.StatusAccepted {
			accepted++
		} else if last.status != http.StatusTooManyRequests {
			t.Fatalf("send %d: %d %s", i, last.status, last.raw)
		}
	}
	if accepted != 20 || last.str("rule") != "otp-send-per-ip" {
		t.Fatalf("%d of 25 accepted (want 20), last denial by %q", accepted, last.str("rule"))
	}

	// Behind a trusted proxy, the header is believed: the forwarded
	// client is counted, not the proxy.
	p := start(t, b.redisURL, "network: {trustedProxies: [127.0.0.0/8]}\n")
	for i := range 25 {
		r := p.send(t, "email", fmt.Sprintf("user%d@example.com", i), "signup", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		if r.status != http.StatusAccepted {
			t.Fatalf("behind a trusted proxy, send %d from its own client: %d %s", i, r.status, r.raw)
		}
	}
}

func burn(t *testing.T, b backend) {
	s := start(t, b.redisURL, loaded)
	to := "burn@example.com"
	if r := s.send(t, "email", to, "login"); r.status != http.StatusAccepted {
		t.Fatalf("send: %d %s", r.status, r.raw)
	}
	code := s.lastCode(t, to)
	for i := range 5 {
		if r := s.verify(t, to, "login", wrong(code, i)); r.status != http.StatusUnprocessableEntity || r.str("code") != "invalid_code" {
			t.Fatalf("wrong code %d: %d %s", i, r.status, r.raw)
		}
	}
	if r := s.verify(t, to, "login", code); r.status != http.StatusUnprocessableEntity || r.str("code") != "invalid_code" {
		t.Fatalf("the right code after 5 wrong ones: %d %s, want 422 (burned)", r.status, r.raw)
	}
}

func parallelVerifies(t *testing.T, b backend) {
	s := start(t, b.redisURL, "store: {timeout: 10s}\n") // exactness under a burst, not the latency bound
	to := "+14155550123"
	if r := s.send(t, "sms", "(415) 555-0123", "signup"); r.status != http.StatusAccepted || r.str("to") != "+1********23" {
		t.Fatalf("send: %d %s", r.status, r.raw)
	}
	code := s.lastCode(t, to)
	var wg sync.WaitGroup
	replies := make([]reply, 20)
	for i := range replies {
		wg.Go(func() { replies[i] = s.verify(t, "+1 415 555 0123", "signup", code) })
	}
	wg.Wait()
	// The others are answered as a wrong code: the right one is used.
	approved := 0
	for _, r := range replies {
		switch {
		case r.status == http.StatusOK:
			approved++
		case r.status == http.StatusUnprocessableEntity && r.str("code") == "invalid_code":
		default:
			t.Errorf("unexpected answer %d %s", r.status, r.raw)
		}
	}
	if approved != 1 {
		t.Errorf("%d of 20 parallel verifies approved, want exactly 1", approved)
	}
}

func resend(t *testing.T, b backend) {
	// The destination's failure rule at 5, so the test can see the count
	// survive the resend.
	s := start(t, b.redisURL, `
rules:
  - {name: send-per-destination, action: otp.send, key: [destination], limit: 5, window: 1m}
  - {name: verify-failures, action: otp.verify, key: [destination], count: failures, limit: 5, window: 1h}
`)
	to := "resend@example.com"
	s.send(t, "email", to, "reset")
	first := s.lastCode(t, to)
	for i := range 3 {
		if r := s.verify(t, to, "reset", wrong(first, i)); r.status != http.StatusUnprocessableEntity {
			t.Fatalf("wrong code: %d %s", r.status, r.raw)
		}
	}
	if r := s.send(t, "email", to, "reset"); r.status != http.StatusAccepted {
		t.Fatalf("resend: %d %s", r.status, r.raw)
	}
	second := s.lastCode(t, to)
	// One time in a million the new code has the same digits; then a
	// wrong guess stands in for the replaced code.
	if first != second {
		if r := s.verify(t, to, "reset", first); r.status != http.StatusUnprocessableEntity {
			t.Fatalf("the replaced code: %d %s, want 422", r.status, r.raw)
		}
	} else if r := s.verify(t, to, "reset", wrong(first, 7)); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("wrong code: %d %s", r.status, r.raw)
	}
	// 4 failures so far, across both codes; one more reaches the limit.
	if r := s.verify(t, to, "reset", wrong(second, 3)); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("5th failure: %d %s", r.status, r.raw)
	}
	r := s.verify(t, to, "reset", second)
	if r.status != http.StatusTooManyRequests || r.str("rule") != "verify-failures" {
		t.Fatalf("the right new code after 5 failures over two codes: %d %s, want 429 by verify-failures (the resend must not reset the count)", r.status, r.raw)
	}
}

func expiry(t *testing.T, b backend) {
	s := start(t, b.redisURL, "otp: {ttl: 2s}\n")
	s.send(t, "email", "late@example.com", "verify")
	s.send(t, "email", "early@example.com", "verify")
	if r := s.verify(t, "early@example.com", "verify", s.lastCode(t, "early@example.com")); r.status != http.StatusOK {
		t.Fatalf("a code within its 2s: %d %s", r.status, r.raw)
	}
	time.Sleep(2500 * time.Millisecond)
	if r := s.verify(t, "late@example.com", "verify", s.lastCode(t, "late@example.com")); r.status != http.StatusUnprocessableEntity || r.str("code") != "invalid_code" {
		t.Fatalf("a code 2.5s after a 2s ttl: %d %s, want 422", r.status, r.raw)
	}
}

func badInput(t *testing.T, b backend) {
	rdb := b.client()
	defer rdb.Close()
	flush(t, rdb)
	s := start(t, b.redisURL, "otp: {sms: {allowedCountries: [US, GB]}}\n")
	big := `{"channel":"email","to":"` + strings.Repeat("a", 1<<20) + `@example.com","purpose":"signup"}`
	cases := []struct {
		name, path, body string
		status           int
		field            string // the errors member that must name the problem
	}{
		{"empty body", "/v1/otp/send", ``, 400, "body"},
		{"not JSON", "/v1/otp/send", `channel=email`, 400, "body"},
		{"array", "/v1/otp/send", `[{"channel":"email","to":"a@example.com","purpose":"signup"}]`, 400, "body"},
		{"string", "/v1/otp/send", `"a@example.com"`, 400, "body"},
		{"null", "/v1/otp/send", `null`, 400, "body"},
		{"number as to", "/v1/otp/send", `{"channel":"email","to":12345,"purpose":"signup"}`, 400, "to"},
		{"array as to", "/v1/otp/send", `{"channel":"email","to":["a@example.com"],"purpose":"signup"}`, 400, "to"},
		{"object as purpose", "/v1/otp/send", `{"channel":"email","to":"a@example.com","purpose":{"x":1}}`, 400, "purpose"},
		{"bool as channel", "/v1/otp/send", `{"channel":true,"to":"a@example.com","purpose":"signup"}`, 400, "channel"},
		{"duplicate key", "/v1/otp/send", `{"channel":"email","to":"a@example.com","to":"b@example.com","purpose":"signup"}`, 400, "body"},
		{"case-variant key", "/v1/otp/send", `{"channel":"email","To":"a@example.com","purpose":"signup"}`, 400, "To"},
		{"unknown field", "/v1/otp/send", `{"channel":"email","to":"a@example.com","purpose":"signup","admin":true}`, 400, "admin"},
		{"trailing data", "/v1/otp/send", `{"channel":"email","to":"a@example.com","purpose":"signup"} {}`, 400, "body"},
		{"trailing garbage", "/v1/otp/send", `{"channel":"email","to":"a@example.com","purpose":"signup"}x`, 400, "body"},
		{"invalid UTF-8", "/v1/otp/send", "{\"channel\":\"email\",\"to\":\"a\xff@example.com\",\"purpose\":\"signup\"}", 400, "body"},
		{"NUL escape", "/v1/otp/send", `{"channel":"email","to":"a\u0000@example.com","purpose":"signup"}`, 400, "body"},
		{"1 MB field", "/v1/otp/send", big, 413, ""},
		{"unknown channel", "/v1/otp/send", `{"channel":"fax","to":"a@example.com","purpose":"signup"}`, 400, "channel"},
		{"missing channel", "/v1/otp/send", `{"to":"a@example.com","purpose":"signup"}`, 400, "channel"},
		{"unknown purpose", "/v1/otp/send", `{"channel":"email","to":"a@example.com","purpose":"admin"}`, 400, "purpose"},
		{"missing purpose", "/v1/otp/send", `{"channel":"email","to":"a@example.com"}`, 400, "purpose"},
		{"bad email", "/v1/otp/send", `{"channel":"email","to":"not-an-email","purpose":"signup"}`, 400, "to"},
		{"invisible character", "/v1/otp/send", `{"channel":"email","to":"a\u200b@example.com","purpose":"signup"}`, 400, "to"},
		{"invalid phone", "/v1/otp/send", `{"channel":"sms","to":"+1 555","purpose":"signup"}`, 400, "to"},
		{"letters in phone", "/v1/otp/send", `{"channel":"sms","to":"+1 415 CALL NOW","purpose":"signup"}`, 400, "to"},
		{"premium-rate phone", "/v1/otp/send", `{"channel":"sms","to":"+1 900 555 0100","purpose":"signup"}`, 400, "to"},
		{"disallowed country", "/v1/otp/send", `{"channel":"sms","to":"+33 6 12 34 56 78","purpose":"signup"}`, 400, "to"},
		{"bad locale", "/v1/otp/send", `{"channel":"email","to":"a@example.com","purpose":"signup","locale":"<script>"}`, 400, "locale"},
		{"verify: short code", "/v1/otp/verify", `{"to":"a@example.com","purpose":"signup","code":"123"}`, 400, "code"},
		{"verify: letters in code", "/v1/otp/verify", `{"to":"a@example.com","purpose":"signup","code":"12345a"}`, 400, "code"},
		{"verify: number as code", "/v1/otp/verify", `{"to":"a@example.com","purpose":"signup","code":123456}`, 400, "code"},
		{"verify: unknown purpose", "/v1/otp/verify", `{"to":"a@example.com","purpose":"x","code":"123456"}`, 400, "purpose"},
		{"verify: channel is not a verify field", "/v1/otp/verify", `{"to":"a@example.com","purpose":"signup","code":"123456","channel":"email"}`, 400, "channel"},
		{"verify: bad phone", "/v1/otp/verify", `{"to":"+1 900 555 0100","purpose":"signup","code":"123456"}`, 400, "to"},
	}
	for _, c := range cases {
		r := s.do(t, http.MethodPost, c.path, c.body)
		want := map[int]string{400: "invalid_request", 413: "payload_too_large"}[c.status]
		if r.status != c.status || r.str("code") != want || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s, want %d %s", c.name, r.status, r.header.Get("Content-Type"), r.raw, c.status, want)
			continue
		}
		if c.field != "" {
			errs, _ := r.body["errors"].(map[string]any)
			if msg, _ := errs[c.field].(string); msg == "" {
				t.Errorf("%s: errors has no %q: %s", c.name, c.field, r.raw)
			}
		}
		for _, k := range []string{"type", "title", "detail"} {
			if r.str(k) == "" {
				t.Errorf("%s: problem without %s: %s", c.name, k, r.raw)
			}
		}
	}
	if msgs := s.messages(t); len(msgs) != 0 {
		t.Errorf("%d messages sent for malformed requests", len(msgs))
	}
	if keys := dump(t, rdb); len(keys) != 0 {
		t.Errorf("malformed requests touched %d keys: %v", len(keys), keys)
	}
}

func noLeak(t *testing.T, b backend) {
	// 10-digit codes, so that a code cannot appear in a log line by chance.
	s := start(t, b.redisURL, "otp: {length: 10}\n")
	rdb := b.client()
	defer rdb.Close()
	email, phone := "secret.person+leak@example.org", "+44 7911 123456"
	s.send(t, "email", email, "signup")
	s.send(t, "sms", phone, "signup")
	codes := []string{s.lastCode(t, email), s.lastCode(t, "+447911123456")}
	s.verify(t, email, "signup", wrong(codes[0], 0))
	// What Redis holds while the codes are pending.
	pending := dump(t, rdb)
	s.verify(t, email, "signup", codes[0])
	s.verify(t, phone, "signup", wrong(codes[1], 1))
	after := dump(t, rdb)

	logs := s.logs.String()
	if !strings.Contains(logs, `"msg":"decision"`) {
		t.Fatalf("no decision records in the logs:\n%s", logs)
	}
	secrets := append(codes, "secret.person", "7911123456", "7911 123456", "example.org")
	for _, sec := range secrets {
		if strings.Contains(logs, sec) {
			t.Errorf("the server's logs contain %q", sec)
		}
		for _, kv := range []map[string]string{pending, after} {
			for k, v := range kv {
				if strings.Contains(k, sec) || strings.Contains(v, sec) {
					t.Errorf("redis key %s (value %s) contains %q", k, v, sec)
				}
			}
		}
	}
	if len(pending) == 0 {
		t.Fatal("the scan found no keys at all")
	}
}

// wrong returns a code of the same length that differs from code (for i
// below 9 × its length, each i a different one).
func wrong(code string, i int) string {
	b := []byte(code)
	b[i%len(b)] = '0' + (b[i%len(b)]-'0'+1+byte(i/len(b)%9))%10
	return string(b)
}
