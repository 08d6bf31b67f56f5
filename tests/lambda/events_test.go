package lambda

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	lambdaevents "github.com/aws/aws-lambda-go/events"
	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/internal/apigw"
	"github.com/otpguard/otpguard/internal/authenv"
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/eventbus"
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
	"github.com/otpguard/otpguard/internal/triggers"
)

// eventsConfig: a lockout after 3 failures per account, the networks an
// account's failures come from, a global SMS cap of 2.
const eventsConfig = `otp: {ttl: 5m}
store: {timeout: 1s}
rules:
  - {name: login-per-account, action: login, key: [account], limit: 3, window: 1h, count: failures,
     lockout: {initial: 1m, factor: 2, max: 15m}}
  - {name: login-networks-per-account, action: login, key: [account], algorithm: distinct, of: ip/16, limit: 50, window: 24h}
  - {name: sms-global, action: otp.send, key: [global], limit: 2, window: 1h, when: {channel: [sms]}}
`

// apiCall is an HTTP API event for fn's handler.
func apiCall(t *testing.T, h func(context.Context, lambdaevents.APIGatewayV2HTTPRequest) (lambdaevents.APIGatewayV2HTTPResponse, error),
	method, path, body, ip string, iam bool) lambdaevents.APIGatewayV2HTTPResponse {
	t.Helper()
	e := lambdaevents.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: method + " " + path, RawPath: path, Body: body,
		Headers: map[string]string{"content-type": "application/json"}}
	e.RequestContext.HTTP = lambdaevents.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, SourceIP: ip, Protocol: "HTTP/1.1"}
	e.RequestContext.RequestID = fmt.Sprintf("req-%d", time.Now().UnixNano())
	if iam {
		e.RequestContext.Authorizer = &lambdaevents.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			IAM: &lambdaevents.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: "arn:aws:sts::123456789012:assumed-role/ops/alice"}}
	}
	resp, err := h(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestSecurityEventsReachEventBridge: the functions publish each security
// event once per situation through the SDK's EventBridge client (PutEvents
// against the fake endpoint), with its documented detail, and none
// carries an address, a number, an account name or an IP: a lockout
// started (and, its failures coming from three networks, a suspected
// lockout-DoS), once however many refused attempts follow; the global SMS
// cap tripped, once; an admin unblock; a config applied and one rejected,
// once each whatever the number of containers.
func TestSecurityEventsReachEventBridge(t *testing.T) {
	rb := lambdaBackends(t)[0]
	aws := newTriggerAWS(rb)
	defer aws.Close()
	aws.SetParameter("/otpguard/config", eventsConfig)
	aws.SetUser("ann@example.com", awsfake.User{Password: "correct horse battery staple", Confirmed: true})
	env := triggerEnv(aws, rb)
	env["EVENT_BUS_NAME"] = "security"
	env["STACK_NAME"] = "shop-otpguard"
	env["AUTH"], env["COGNITO_USER_POOL_ID"], env["COGNITO_CLIENT_ID"] = "cognito", "us-east-1_test", "testclient"
	env["CONFIG_REFRESH"] = "1s"
	getenv := func(k string) string { return env[k] }
	start := func(fn lambdaapp.Function) func(context.Context, lambdaevents.APIGatewayV2HTTPRequest) (lambdaevents.APIGatewayV2HTTPResponse, error) {
		return apigw.Handler(lambdaapp.Start(context.Background(), fn, lambdaapp.Parts{Senders: delivery.Senders, Auth: authenv.Authenticator},
			getenv, &testutil.Buffer{}, &testutil.Buffer{}))
	}
	login, send, backend := start(lambdaapp.Login), start(lambdaapp.Send), start(lambdaapp.Backend)
	byType := func(dt string) []map[string]any {
		var out []map[string]any
		for _, e := range aws.Events() {
			if e.DetailType != dt {
				continue
			}
			if e.Source != "otpguard" || e.EventBusName != "security" {
				t.Errorf("event %s: source %q bus %q", dt, e.Source, e.EventBusName)
			}
			var d map[string]any
			if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
				t.Fatal(err)
			}
			if d["stack"] != "shop-otpguard" || d["at"] == nil {
				t.Errorf("event %s without stack or time: %v", dt, d)
			}
			out = append(out, d)
		}
		return out
	}
	// both containers read the config at init: Config Applied once
	if got := byType(events.ConfigApplied); len(got) != 1 || got[0]["rules"] != 3.0 {
		t.Fatalf("Config Applied at start: %v", got)
	}

	// three wrong passwords from three /16s, then refused attempts
	for i := range 6 {
		apiCall(t, login, "POST", "/v1/login", `{"username":"ann@example.com","password":"wrong password entirely"}`,
			fmt.Sprintf("198.%d.100.7", 51+i%3), false)
	}
	started, dos := byType(events.LockoutStarted), byType(events.LockoutDoS)
	if len(started) != 1 || started[0]["rule"] != "login-per-account" || started[0]["action"] != "login" ||
		started[0]["lockedForSeconds"] == nil || started[0]["subject"] == "" {
		t.Fatalf("Lockout Started: %v", started)
	}
	if len(dos) != 1 || dos[0]["networks"] != 3.0 || dos[0]["networkRule"] != "login-networks-per-account" || dos[0]["subject"] != started[0]["subject"] {
		t.Fatalf("Lockout DoS Suspected: %v", dos)
	}

	// the global SMS cap: two sends, then refusals
	for i := range 5 {
		apiCall(t, send, "POST", "/v1/otp/send", fmt.Sprintf(`{"channel":"sms","to":"+44 7911 12345%d","purpose":"login"}`, i), "203.0.113.9", false)
	}
	if got := byType(events.BudgetTripped); len(got) != 1 || got[0]["rule"] != "sms-global" || got[0]["kind"] != "global" {
		t.Fatalf("Budget Tripped: %v", got)
	}

	// an admin unblocks the account: the owner's next login succeeds
	if r := apiCall(t, backend, "DELETE", "/v1/blocks/account/ann@example.com", "", "10.0.0.1", true); r.StatusCode != 204 {
		t.Fatalf("unblock: %d %s", r.StatusCode, r.Body)
	}
	unblock := byType(events.AdminUnblock)
	if len(unblock) != 1 || unblock[0]["dimension"] != "account" || unblock[0]["subject"] != started[0]["subject"] ||
		!strings.Contains(fmt.Sprint(unblock[0]["caller"]), "assumed-role/ops/alice") {
		t.Fatalf("Admin Unblock: %v", unblock)
	}
	if r := apiCall(t, login, "POST", "/v1/login", `{"username":"ann@example.com","password":"correct horse battery staple"}`, "198.51.100.7", false); r.StatusCode != 200 {
		t.Fatalf("login after the unblock: %d %s", r.StatusCode, r.Body)
	}

	// a bad document, then a good new one: each container refreshes
	aws.SetParameter("/otpguard/config", "rules:\n  - {name: x, action: login, key: [nothing], limit: 1, window: 1h}\n")
	refresh := func() {
		time.Sleep(1600 * time.Millisecond) // CONFIG_REFRESH 1s, +50% jitter
		for range 2 {
			apiCall(t, login, "POST", "/v1/login", `{"username":"bob@example.com","password":"x"}`, "192.0.2.1", false)
			apiCall(t, backend, "POST", "/v1/decisions", `{"action":"login","subject":{"account":"zed"}}`, "10.0.0.1", true)
			time.Sleep(300 * time.Millisecond)
		}
	}
	refresh()
	if got := byType(events.ConfigRejected); len(got) != 1 || !strings.Contains(fmt.Sprint(got[0]["reason"]), "nothing") {
		t.Fatalf("Config Rejected: %v", got)
	}
	aws.SetParameter("/otpguard/config", eventsConfig+"  - {name: extra, action: signup, key: [global], limit: 100, window: 1h}\n")
	refresh()
	if got := byType(events.ConfigApplied); len(got) != 2 || got[1]["rules"] != 4.0 {
		t.Fatalf("Config Applied after the change: %v", got)
	}

	// every event's detail has its documented members, and no clear
	// identifier
	want := map[string][]string{
		events.LockoutStarted: {"action", "rule", "dimensions", "subject", "lockedForSeconds"},
		events.LockoutDoS:     {"action", "rule", "subject", "networks", "networkRule", "lockedForSeconds"},
		events.BudgetTripped:  {"action", "rule", "kind", "dimensions", "subject", "retryAfterSeconds"},
		events.ConfigApplied:  {"config", "rules"},
		events.ConfigRejected: {"config", "reason"},
		events.AdminUnblock:   {"dimension", "subject", "rules", "caller"},
	}
	for _, e := range aws.Events() {
		var d map[string]any
		_ = json.Unmarshal([]byte(e.Detail), &d)
		keys := want[e.DetailType]
		if keys == nil {
			t.Errorf("undocumented detail-type %q", e.DetailType)
		}
		for _, k := range append(keys, "stack", "at") {
			if _, ok := d[k]; !ok {
				t.Errorf("%s without %s: %v", e.DetailType, k, d)
			}
		}
		for k := range d {
			if k != "stack" && k != "at" && !slices.Contains(keys, k) {
				t.Errorf("%s has an undocumented member %s", e.DetailType, k)
			}
		}
		for _, clear := range []string{"ann@", "example.com", "7911", "198.5", "203.0.113", "bob", "zed"} {
			if strings.Contains(e.Detail, clear) {
				t.Errorf("%s carries %q: %s", e.DetailType, clear, e.Detail)
			}
		}
	}
}

// TestTheLeanCallsSendWhatTheSDKSends: the functions call PutEvents and
// KMS Decrypt without the generated clients (internal/awsjson); the SDK's
// own clients, against the same fake endpoint, are understood the same
// way and understand its answers: the fake speaks the services' protocol,
// and the lean calls speak it too.
func TestTheLeanCallsSendWhatTheSDKSends(t *testing.T) {
	aws := awsfake.New()
	defer aws.Close()
	cfg := sdkaws.Config{Region: "us-east-1", BaseEndpoint: sdkaws.String(aws.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")}
	ctx := context.Background()
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	e := events.Event{DetailType: events.AdminUnblock, Detail: map[string]any{"dimension": "account", "subject": "abc", "rules": []string{"r"}, "caller": "x"}}
	pub := eventbus.New(cfg, "security", "shop")
	pub.Now = func() time.Time { return at }
	if err := pub.Publish(ctx, e); err != nil {
		t.Fatal(err)
	}
	detail, _ := json.Marshal(events.Detail(e, "shop", at))
	out, err := eventbridge.NewFromConfig(cfg).PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		Source: sdkaws.String(events.Source), DetailType: sdkaws.String(e.DetailType), Detail: sdkaws.String(string(detail)), EventBusName: sdkaws.String("security"),
	}}})
	if err != nil || out.FailedEntryCount != 0 || len(out.Entries) != 1 || out.Entries[0].EventId == nil {
		t.Fatalf("the SDK's PutEvents: %+v %v", out, err)
	}
	got := aws.Events()
	if len(got) != 2 || got[0] != got[1] {
		t.Fatalf("the lean call and the SDK's differ: %+v", got)
	}
	// a bad entry is reported as the service reports it
	out, err = eventbridge.NewFromConfig(cfg).PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		Source: sdkaws.String("otpguard"), DetailType: sdkaws.String("x"), Detail: sdkaws.String("{not json"),
	}}})
	if err != nil || out.FailedEntryCount != 1 {
		t.Fatalf("a malformed entry: %+v %v", out, err)
	}

	key := "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
	aws.AddKMSKey(key)
	sdk := kms.NewFromConfig(cfg)
	ec := map[string]string{"userpool-id": "us-east-1_test"}
	dk, err := sdk.GenerateDataKey(ctx, &kms.GenerateDataKeyInput{KeyId: sdkaws.String(key), NumberOfBytes: sdkaws.Int32(32), EncryptionContext: ec})
	if err != nil {
		t.Fatal(err)
	}
	lean, err := triggers.NewKMS(cfg, time.Second).Decrypt(ctx, key, dk.CiphertextBlob, ec)
	if err != nil || !bytes.Equal(lean, dk.Plaintext) {
		t.Fatalf("the lean Decrypt: %x %v, want %x", lean, err, dk.Plaintext)
	}
	viaSDK, err := sdk.Decrypt(ctx, &kms.DecryptInput{CiphertextBlob: dk.CiphertextBlob, KeyId: sdkaws.String(key), EncryptionContext: ec})
	if err != nil || !bytes.Equal(viaSDK.Plaintext, dk.Plaintext) {
		t.Fatalf("the SDK's Decrypt: %v", err)
	}
	if _, err := triggers.NewKMS(cfg, time.Second).Decrypt(ctx, key, dk.CiphertextBlob, map[string]string{"userpool-id": "another"}); err == nil {
		t.Fatal("a data key decrypted under another encryption context")
	}
}
