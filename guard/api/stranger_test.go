package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/localredis"
)

// TestAStrangerCannotKeepAnAddressFromItsCodes: under the default rules,
// a stranger on two networks sends 8 codes to someone else's address
// (a minute apart, under the per-minute pace), enters none of them and
// guesses five times at each until it burns (at least 6 codes and 30
// guesses answered, or the attack did not happen); the owner, on a
// network of their own, then asks for a code and enters it. Neither the
// unanswered codes (counted per address and network) nor the wrong
// guesses (counted on the guessing client and the code, not the address)
// cost the owner anything. The address's daily cap on codes is shared by
// construction (docs/security.md): the stranger stays under it here.
func TestAStrangerCannotKeepAnAddressFromItsCodes(t *testing.T) {
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	now := time.Date(2026, 11, 25, 13, 0, 0, 0, time.UTC)
	srv.SetTime(now)
	h, out := serveOn(t, srv, "network: {trustedProxies: [198.51.100.0/24]}\n", nil)
	const to = "ann@example.com"
	strangers := []string{"203.0.113.9", "192.0.2.44"}
	sent, guessed := 0, 0
	for i := range 8 {
		ip := strangers[i%2]
		now = now.Add(61 * time.Second)
		srv.SetTime(now)
		w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"channel": "email", "to": to, "purpose": "login"}, false, "X-Forwarded-For", ip)
		switch w.Code {
		case http.StatusAccepted:
			sent++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("the stranger's send %d: %d %v", i+1, w.Code, m)
		}
		for g := range 5 {
			w, m := call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": to, "purpose": "login", "code": fmt.Sprintf("%06d", 111111*g+i)}, false, "X-Forwarded-For", ip)
			switch w.Code {
			case http.StatusUnprocessableEntity:
				guessed++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("the stranger's guess %d at code %d: %d %v", g+1, i+1, w.Code, m)
			}
		}
	}
	if sent < 6 || guessed < 30 {
		t.Fatalf("the stranger sent %d codes and guessed %d times: the attack did not happen", sent, guessed)
	}
	now = now.Add(61 * time.Second)
	srv.SetTime(now)
	w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"channel": "email", "to": to, "purpose": "login"}, false)
	if w.Code != http.StatusAccepted {
		t.Fatalf("the owner's send after a stranger's 8 codes and 40 guesses: %d %v", w.Code, m)
	}
	w, m = call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": to, "purpose": "login", "code": out.last(t).Code}, false)
	if w.Code != http.StatusOK {
		t.Fatalf("the owner's right code after a stranger's 8 codes and 40 guesses: %d %v", w.Code, m)
	}
}

// TestASendToAnotherSpellingLeavesTheOwnersCode: a stranger's sends to
// other spellings of the owner's mailbox (case, a +tag) do not replace
// the code the owner is about to enter: each spelling has its own code,
// bound to it; a send to the owner's own spelling replaces it with a code
// that reaches the owner and works.
func TestASendToAnotherSpellingLeavesTheOwnersCode(t *testing.T) {
	h, out := serve(t, "network: {trustedProxies: [198.51.100.0/24]}\n", nil)
	send := func(to string, ip ...string) {
		t.Helper()
		var hdr []string
		if len(ip) > 0 {
			hdr = []string{"X-Forwarded-For", ip[0]}
		}
		if w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"channel": "email", "to": to, "purpose": "verify"}, false, hdr...); w.Code != http.StatusAccepted {
			t.Fatalf("send to %s: %d %v", to, w.Code, m)
		}
	}
	verify := func(to, code string) int {
		w, _ := call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": to, "purpose": "verify", "code": code}, false)
		return w.Code
	}
	send("ann@example.com")
	owners := out.last(t).Code
	send("ANN@example.com", "203.0.113.9")
	strangers := out.last(t).Code
	if got := verify("ann@example.com", owners); got != http.StatusOK {
		t.Fatalf("the owner's code after a stranger's send to ANN@example.com: %d", got)
	}
	if got := verify("ANN@example.com", strangers); got != http.StatusOK {
		t.Errorf("the other spelling's own code: %d", got)
	}
}

// TestAWrongCodeCountsOnTheAddressARuleOfYoursCounts: with a rule of your
// own on otp.verify keyed on the destination and counting failures, a
// wrong guess at a pending code is a failure of the address (a guess at
// no code is not: TestStrangersCannotLockAnAddress in tests/e2e): past
// its limit the next guess is refused by the rule.
func TestAWrongCodeCountsOnTheAddressARuleOfYoursCounts(t *testing.T) {
	h, _ := local(t, "  - {name: guesses, action: otp.verify, key: [destination], count: failures, limit: 2, window: 1h}\n")
	if w, m := call(t, h, "POST", "/v1/otp/send", map[string]string{"channel": "email", "to": "ann@example.com", "purpose": "verify"}, false); w.Code != http.StatusAccepted {
		t.Fatalf("send: %d %v", w.Code, m)
	}
	for i, want := range []int{422, 422, 429} {
		w, m := call(t, h, "POST", "/v1/otp/verify", map[string]string{"to": "ann@example.com", "purpose": "verify", "code": fmt.Sprintf("%06d", i)}, false)
		if w.Code != want || (want == 429 && m["rule"] != "guesses") {
			t.Fatalf("wrong guess %d: %d %v, want %d", i+1, w.Code, m, want)
		}
	}
}
