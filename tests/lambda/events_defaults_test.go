package lambda

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	lambdaevents "github.com/aws/aws-lambda-go/events"

	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/internal/apigw"
	"github.com/otpguard/otpguard/internal/authenv"
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// TestLockoutEventsUnderTheDefaultRules: the default per-account lockout
// is keyed on the account's device (the bucket its untrusted clients
// share). Thirty wrong passwords from four /16s lock it and are reported
// as Lockout Started and Lockout DoS Suspected (the reviewed code looked
// for a rule keyed on [account] only, and never reported the DoS under
// the defaults). After an administrator's unblock, the next lockout of
// the same account, handled by another container, is reported again:
// an event's deduplication names its lockout, so the mark the first one
// left (in Redis and in the containers) does not hide the second.
func TestLockoutEventsUnderTheDefaultRules(t *testing.T) {
	rb := lambdaBackends(t)[0]
	aws := newTriggerAWS(rb)
	defer aws.Close()
	aws.SetParameter("/otpguard/config", "store: {timeout: 2s}\n") // the default rules
	aws.SetUser("ann@example.com", awsfake.User{Password: "correct horse battery staple", Confirmed: true})
	env := triggerEnv(aws, rb)
	env["EVENT_BUS_NAME"] = "security"
	env["STACK_NAME"] = "shop-otpguard"
	env["AUTH"], env["COGNITO_USER_POOL_ID"], env["COGNITO_CLIENT_ID"] = "cognito", "us-east-1_test", "testclient"
	getenv := func(k string) string { return env[k] }
	start := func(fn lambdaapp.Function) func(context.Context, lambdaevents.APIGatewayV2HTTPRequest) (lambdaevents.APIGatewayV2HTTPResponse, error) {
		return apigw.Handler(lambdaapp.Start(context.Background(), fn, lambdaapp.Parts{Senders: delivery.Senders, Auth: authenv.Authenticator},
			getenv, &testutil.Buffer{}, &testutil.Buffer{}))
	}
	loginA, loginB, backend := start(lambdaapp.Login), start(lambdaapp.Login), start(lambdaapp.Backend)
	byType := func(dt string) []map[string]any {
		var out []map[string]any
		for _, e := range aws.Events() {
			if e.DetailType == dt {
				var d map[string]any
				if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
					t.Fatal(err)
				}
				out = append(out, d)
			}
		}
		return out
	}
	fail := func(h func(context.Context, lambdaevents.APIGatewayV2HTTPRequest) (lambdaevents.APIGatewayV2HTTPResponse, error), i int) {
		t.Helper()
		// four /16s, a new address each time (no per-address rule trips)
		ip := fmt.Sprintf("%d.%d.%d.7", 60+i%4, 10+i%4, i)
		r := apiCall(t, h, "POST", "/v1/login", `{"username":"ann@example.com","password":"wrong password entirely"}`, ip, false)
		if r.StatusCode != 401 {
			t.Fatalf("wrong password %d: %d %s (want 401: checked and counted)", i, r.StatusCode, r.Body)
		}
	}
	for i := range 30 {
		fail(loginA, i)
	}
	started, dos := byType(events.LockoutStarted), byType(events.LockoutDoS)
	if len(started) != 1 || started[0]["rule"] != "login-per-device" {
		t.Fatalf("Lockout Started after 30 failures: %v", started)
	}
	if len(dos) != 1 || dos[0]["rule"] != "login-per-device" || dos[0]["networks"] != 4.0 ||
		dos[0]["networkRule"] != "login-failed-networks-per-account" || dos[0]["subject"] != started[0]["subject"] {
		t.Fatalf("Lockout DoS Suspected after 30 failures from 4 /16s: %v", dos)
	}
	fail(loginB, 30) // another container meets the same lockout: no second event
	if n := len(byType(events.LockoutStarted)); n != 1 {
		t.Fatalf("the same lockout met again: %d Lockout Started", n)
	}
	if r := apiCall(t, backend, "DELETE", "/v1/blocks/account/ann@example.com", "", "10.0.0.1", true); r.StatusCode != 204 {
		t.Fatalf("unblock: %d %s", r.StatusCode, r.Body)
	}
	for i := range 21 {
		fail(loginB, 100+i)
	}
	if got := byType(events.LockoutStarted); len(got) != 2 || got[1]["rule"] != "login-per-device" {
		t.Fatalf("a second lockout after an unblock, through another container: %d Lockout Started: %v", len(got), got)
	}
}
