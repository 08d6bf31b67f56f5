package lambda

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
	"github.com/otpguard/otpguard/internal/triggers"
)

// defaultRules is the trigger functions' config parameter for these
// tests: the shipped rules (a store timeout sized for a loaded machine).
const defaultRules = "otp: {ttl: 5m}\nstore: {timeout: 1s}\n"

// signInHandler is the cognitoauth function's handler, in process, on rb
// with the default rules and backendclient trusted to pass otpguard:ip.
func signInHandler(t *testing.T, rb lambdaRedis) (func(event []byte) error, *testutil.Buffer) {
	t.Helper()
	aws := newTriggerAWS(rb)
	t.Cleanup(aws.Close)
	aws.SetParameter("/otpguard/config", defaultRules)
	env := triggerEnv(aws, rb)
	var logs testutil.Buffer
	h := lambdaapp.TriggerHandler(lambdaapp.Start(context.Background(), lambdaapp.Cognitoauth,
		lambdaapp.Parts{Senders: delivery.Senders, Trigger: triggers.Build}, func(k string) string { return env[k] }, &testutil.Buffer{}, &logs))
	return func(event []byte) error {
		_, err := h(context.Background(), event)
		return err
	}, &logs
}

// signInEvent is a PreAuthentication (with the trusted backend's
// otpguard:ip in clientMetadata, as InitiateAuth passes it) or a
// PostAuthentication (Cognito passes it no client metadata).
func signInEvent(source, user, ip string) []byte {
	req := map[string]any{"userAttributes": map[string]string{"email": user + "@example.com"}}
	if strings.HasPrefix(source, "Pre") {
		req["clientMetadata"] = map[string]string{"otpguard:ip": ip}
		req["userNotFound"] = false
	} else {
		req["newDeviceUsed"] = false
	}
	b, _ := json.Marshal(map[string]any{
		"version": "1", "triggerSource": source + "_Authentication", "region": "us-east-1", "userPoolId": "us-east-1_test",
		"userName": user, "callerContext": map[string]string{"awsSdkVersion": "aws-sdk-go-v2", "clientId": "backendclient"},
		"request": req, "response": map[string]any{},
	})
	return b
}

// remaining is what the failure-counting rules keyed on dimension alone
// leave the subject, in the store.
func remaining(t *testing.T, g *storeReader, dimension string, s guard.Subject) map[string]int64 {
	t.Helper()
	st, err := g.Status(context.Background(), dimension, s)
	if err != nil {
		t.Fatal(err)
	}
	failures := map[string]bool{}
	for _, r := range g.cfg.Rules {
		failures[r.Name] = r.Count == guard.CountFailures
	}
	out := map[string]int64{}
	for _, x := range st {
		if failures[x.Rule] {
			out[x.Rule] = x.Remaining
		}
	}
	return out
}

// TestPostAuthenticationGivesBackWhatPreAuthenticationTook: a trusted backend passes the user's address to
// PreAuthentication, which counts the attempt as a failure on the rules
// keyed on the address and its networks too (ip, ip/16, [account, ip]);
// Cognito passes PostAuthentication no client metadata, yet it gives back
// exactly that. Under the default rules, 11 right-password sign-ins of
// distinct users from one /16 (login-failure-ratio-per-ip16: 80%, at
// least 10) and 6 of one user from one address (login-per-account-ip: 5)
// are all admitted, and the store holds no failure after each. A
// stranger's wrong password timed between a user's PreAuthentication and
// PostAuthentication is never given back, and its address keeps the
// failure; a PreAuthentication without its PostAuthentication (a wrong
// password) stays counted.
func TestPostAuthenticationGivesBackWhatPreAuthenticationTook(t *testing.T) {
	for _, rb := range lambdaBackends(t) {
		t.Run(rb.name, func(t *testing.T) {
			invoke, logs := signInHandler(t, rb)
			g := storeGuard(t, rb, defaultRules)
			addr := func(s string) guard.Subject { return guard.Subject{IP: netip.MustParseAddr(s)} }
			signIn := func(user, ip string) {
				t.Helper()
				if err := invoke(signInEvent("PreAuthentication", user, ip)); err != nil {
					t.Fatalf("%s from %s refused: %v\n%s", user, ip, err, logs.String())
				}
				if err := invoke(signInEvent("PostAuthentication", user, ip)); err != nil {
					t.Fatalf("PostAuthentication of %s: %v", user, err)
				}
			}
			// the same sign-ins through the guard's own decide and settle
			// (what /v1/login does in one request), on other networks: the
			// state the triggers must leave
			control := func(user, ip string) {
				t.Helper()
				req := guard.Request{Action: "login", Subject: guard.Subject{Account: user, IP: netip.MustParseAddr(ip)}, Partial: true}
				d, err := g.Allow(context.Background(), req)
				if err != nil || !d.Allowed {
					t.Fatalf("control %s from %s: %v %+v", user, ip, err, d)
				}
				if _, err := g.Settle(context.Background(), req, d, guard.Success); err != nil {
					t.Fatal(err)
				}
			}
			same := func(what string, d string, got, want guard.Subject) {
				t.Helper()
				g, w := remaining(t, g, d, got), remaining(t, g, d, want)
				if len(w) == 0 {
					t.Fatalf("no failure-counting rule keyed on %s: nothing to check", d)
				}
				if !equal(g, w) {
					t.Errorf("%s, rules keyed on %s: %v left, want %v (as the guard's own settle leaves it)", what, d, g, w)
				}
			}
			// 11 users of one office: one /16, addresses .20 to .30
			for i := range 11 {
				signIn(fmt.Sprintf("user-%02d", i), fmt.Sprintf("198.51.7.%d", 20+i))
				control(fmt.Sprintf("ctl-%02d", i), fmt.Sprintf("10.77.7.%d", 20+i))
			}
			for i := range 11 {
				for _, d := range []string{"ip", "ip/16"} {
					same(fmt.Sprintf("user-%02d", i), d, addr(fmt.Sprintf("198.51.7.%d", 20+i)), addr(fmt.Sprintf("10.77.7.%d", 20+i)))
				}
				same(fmt.Sprintf("user-%02d", i), "account", guard.Subject{Account: fmt.Sprintf("user-%02d", i)}, guard.Subject{Account: fmt.Sprintf("ctl-%02d", i)})
			}
			// 6 of one user from one address
			for range 6 {
				signIn("dana", "198.52.8.9")
				control("ctl-dana", "10.78.8.9")
			}
			for _, d := range []string{"ip", "ip/16"} {
				same("dana", d, addr("198.52.8.9"), addr("10.78.8.9"))
			}
			same("dana", "account", guard.Subject{Account: "dana"}, guard.Subject{Account: "ctl-dana"})
			baseline := map[string]map[string]int64{"ip": remaining(t, g, "ip", addr("203.0.113.250"))}

			// the check sees a failure: a PreAuthentication without its
			// PostAuthentication (a wrong password) stays counted
			if err := invoke(signInEvent("PreAuthentication", "erin", "192.0.2.33")); err != nil {
				t.Fatal(err)
			}
			if got := remaining(t, g, "ip", addr("192.0.2.33")); equal(got, baseline["ip"]) {
				t.Fatalf("a failed attempt left nothing in the store (%v): the checks above could not fail", got)
			}

			// a stranger between the owner's PreAuthentication and
			// PostAuthentication: the stranger's address keeps its failure
			if err := invoke(signInEvent("PreAuthentication", "frank", "198.51.9.1")); err != nil {
				t.Fatal(err)
			}
			if err := invoke(signInEvent("PreAuthentication", "frank", "203.0.113.66")); err != nil {
				t.Fatal(err)
			}
			if err := invoke(signInEvent("PostAuthentication", "frank", "")); err != nil {
				t.Fatal(err)
			}
			if got := remaining(t, g, "ip", addr("203.0.113.66")); equal(got, baseline["ip"]) {
				t.Errorf("the stranger's failure was given back: %v", got)
			}
			// the account's rules count both attempts alike: one is given
			// back, the stranger's one failure stays
			got, full := remaining(t, g, "account", guard.Subject{Account: "frank"}), remaining(t, g, "account", guard.Subject{Account: "nobody"})
			for rule, n := range full {
				want := n - 1
				if rule == "login-failed-networks-per-account" {
					// the two attempts' networks differ: neither entry is
					// shared, so both stay (the side that never gives a
					// stranger's failure back)
					want = n - 2
				}
				if got[rule] != want {
					t.Errorf("%s: frank's account has %d left, want %d (the stranger's failure only)", rule, got[rule], want)
				}
			}
		})
	}
}

func equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestEveryResendIsSettledAtConfirmation: a sign-up's
// code, then a resend (Cognito's ResendCode), both count as unverified
// sends on the destination until the sign-up is confirmed; the
// confirmation settles both (before, the second receipt replaced the
// first, and one send stayed unverified for a day).
func TestEveryResendIsSettledAtConfirmation(t *testing.T) {
	// the default's unverified-sends rule alone (Status reports the rules
	// after an exhausted one as 0: otp-send-per-destination allows 2 a
	// minute)
	const doc = "otp: {ttl: 5m}\nstore: {timeout: 1s}\nrules:\n" +
		"  - {name: otp-unverified-per-destination, action: otp.send, key: [destination], algorithm: sliding_window, count: failures, limit: 3, window: 24h}\n"
	rb := lambdaBackends(t)[1]
	aws := newTriggerAWS(rb)
	defer aws.Close()
	aws.SetParameter("/otpguard/config", doc)
	env := triggerEnv(aws, rb)
	start := func(fn lambdaapp.Function) func([]byte) error {
		h := lambdaapp.TriggerHandler(lambdaapp.Start(context.Background(), fn,
			lambdaapp.Parts{Senders: delivery.Senders, Trigger: triggers.Build}, func(k string) string { return env[k] }, &testutil.Buffer{}, &testutil.Buffer{}))
		return func(ev []byte) error { _, err := h(context.Background(), ev); return err }
	}
	send, auth := start(lambdaapp.Cognitosend), start(lambdaapp.Cognitoauth)
	g := storeGuard(t, rb, doc)
	dest, err := identity.ParseEmail("hana@example.com")
	if err != nil {
		t.Fatal(err)
	}
	unverified := func() map[string]int64 { return remaining(t, g, "destination", guard.Subject{Destination: dest}) }
	fresh := unverified()
	if len(fresh) == 0 {
		t.Fatal("no failure-counting rule keyed on the destination: nothing to check")
	}
	codes := encrypt(t, aws, sampleKeyARN, "forbid", "111111", "222222")
	for i, source := range []string{"SignUp", "ResendCode"} {
		if err := send(senderEvent("CustomEmailSender", source, codes[i], map[string]string{"email": "hana@example.com"})); err != nil {
			t.Fatalf("%s: %v", source, err)
		}
	}
	if len(aws.Emails()) != 2 {
		t.Fatalf("%d emails sent, want 2", len(aws.Emails()))
	}
	sent := unverified()
	for rule, n := range fresh {
		if sent[rule] != n-2 {
			t.Fatalf("%s: %d left after two sends, want %d (the check could not fail)", rule, sent[rule], n-2)
		}
	}
	conf := authEvent("PostConfirmation_ConfirmSignUp", "hana", "appclient", map[string]any{"userAttributes": map[string]string{"email": "hana@example.com", "email_verified": "true"}})
	if err := auth(conf); err != nil {
		t.Fatal(err)
	}
	if got := unverified(); !equal(got, fresh) {
		t.Errorf("after the confirmation: %v left, want %v (every send settled)", got, fresh)
	}
}
