package lambda

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/otpguard/otpguard/guard/esdk"
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/lambdaapp"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
	"github.com/otpguard/otpguard/internal/triggers"
)

// The KMS key of the sample events (events/cognito-*.json): its material
// is fixed so that their encrypted codes decrypt in every run.
const sampleKeyARN = "arn:aws:kms:us-east-1:123456789012:key/0b1e6c3e-5a1f-4c0e-9d7a-8a1d2f3e4b5c"

var sampleKeyMaterial = bytes.Repeat([]byte{0x5a}, 32)

var updateEvents = flag.Bool("update-events", false, "encrypt the sample events' codes again (events/cognito-*.json)")

// encrypt encrypts each plaintext with the AWS Encryption SDK for
// JavaScript and a KMS keyring against the fake KMS, as Cognito does:
// commitment "forbid" is the suite Cognito sends (AES-256, HKDF-SHA384,
// ECDSA P-384, message format 1), "require" the SDK 2.x default.
func encrypt(t testing.TB, aws *awsfake.Server, keyARN, commitment string, plaintexts ...string) []string {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"endpoint": aws.URL, "keyId": keyARN, "plaintexts": plaintexts, "commitment": commitment,
		"context": map[string]string{"userpool-id": "us-east-1_test"}})
	cmd := exec.Command("node", "encrypt.js")
	cmd.Dir = filepath.Join(root, "tests", "lambda", "esdk")
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node encrypt.js (make esdk-node installs the SDK): %v\n%s", err, stderr.String())
	}
	var msgs []string
	if err := json.Unmarshal(out, &msgs); err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestTheEncryptionSDKsMessagesDecrypt: messages made by the SDK's
// JavaScript release (both message formats, framed) decrypt to their
// plaintext; a message altered anywhere, or under another key, does not.
func TestTheEncryptionSDKsMessagesDecrypt(t *testing.T) {
	aws := awsfake.New()
	defer aws.Close()
	aws.AddKMSKey(sampleKeyARN)
	other := "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
	aws.AddKMSKey(other)
	k := kmsClient(t, aws)
	ctx := context.Background()
	for _, commitment := range []string{"forbid", "require"} {
		t.Run(commitment, func(t *testing.T) {
			msgs := encrypt(t, aws, sampleKeyARN, commitment, "123456", strings.Repeat("x", 10000))
			for i, want := range []string{"123456", strings.Repeat("x", 10000)} {
				raw, _ := base64.StdEncoding.DecodeString(msgs[i])
				got, err := esdk.Decrypt(ctx, raw, k, sampleKeyARN)
				if err != nil || string(got) != want {
					t.Fatalf("message %d: %q %v", i, trim(got), err)
				}
			}
			raw, _ := base64.StdEncoding.DecodeString(msgs[0])
			if raw[0] != map[string]byte{"forbid": 1, "require": 2}[commitment] {
				t.Errorf("message format %d", raw[0])
			}
			// every byte, flipped, makes the message fail (never a wrong
			// plaintext): header, data key, body, signature
			for i := range raw {
				bad := bytes.Clone(raw)
				bad[i] ^= 0x01
				if got, err := esdk.Decrypt(ctx, bad, k, sampleKeyARN); err == nil {
					t.Fatalf("byte %d of %d flipped: decrypted to %q", i, len(raw), got)
				}
			}
			for _, n := range []int{0, 1, 40, len(raw) - 1} {
				if _, err := esdk.Decrypt(ctx, raw[:n], k, sampleKeyARN); err == nil {
					t.Fatalf("truncated to %d bytes: decrypted", n)
				}
			}
			if _, err := esdk.Decrypt(ctx, append(bytes.Clone(raw), 0), k, sampleKeyARN); err == nil {
				t.Fatal("a trailing byte: decrypted")
			}
			// the function asks KMS for its own key only
			before := aws.CallsOf("kms:Decrypt")
			if _, err := esdk.Decrypt(ctx, raw, k, other); err == nil {
				t.Fatal("decrypted with a key the message is not under")
			}
			if aws.CallsOf("kms:Decrypt") != before {
				t.Error("a data key under another key was sent to KMS")
			}
		})
	}
}

func trim(b []byte) string {
	if len(b) > 20 {
		return string(b[:20]) + "…"
	}
	return string(b)
}

// kmsClient is the SDK's KMS client on the fake endpoint.
func kmsClient(t testing.TB, aws *awsfake.Server) esdk.KMS {
	t.Helper()
	return triggers.NewKMS(sdkaws.Config{Region: "us-east-1", BaseEndpoint: sdkaws.String(aws.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")}, 2*time.Second)
}

// cognitoConfig is the config parameter of the trigger tests: small limits
// to reach.
const cognitoConfig = `otp: {ttl: 5m}
store: {timeout: 3s} # the tests' machines are shared and loaded (50 invocations at once in one process under -race): an exact count needs no store timeouts
rules:
  - {name: sms-per-destination, action: otp.send, key: [destination], limit: 3, window: 1h}
  - {name: email-per-account, action: otp.send, key: [account], limit: 5, window: 1h}
  - {name: unverified-per-destination, action: otp.send, key: [destination], limit: 10, window: 24h, count: failures}
  - {name: signup-per-destination, action: signup, key: [destination], limit: 2, window: 1h}
  - {name: login-per-account, action: login, key: [account], limit: 3, window: 1h, count: failures}
  - {name: login-per-ip, action: login, key: [ip], limit: 100, window: 1h}
`

// triggerEnv is a trigger function's environment against aws and rb.
func triggerEnv(aws *awsfake.Server, rb lambdaRedis) map[string]string {
	return map[string]string{
		"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "token",
		"AWS_ENDPOINT_URL": aws.URL, "REDIS_URL": rb.url, "REDIS_PASSWORD_SECRET_ID": "otpguard/redis",
		"GUARD_CONFIG_PARAM": "/otpguard/config", "GUARD_HASH_SECRET_ID": "otpguard/hash",
		"SES_FROM": "no-reply@otpguard.example", "SMS_SENDER_ID": "OTPGUARD",
		"COGNITO_KMS_KEY_ARN": sampleKeyARN, "COGNITO_TRUSTED_CLIENTS": "backendclient",
		"EMAIL_PER_SECOND": "100", "SMS_PER_SECOND": "100", // the provider's pace is not what these tests measure
	}
}

func newTriggerAWS(rb lambdaRedis) *awsfake.Server {
	aws := awsfake.New()
	aws.SetSecret("otpguard/hash", strings.Repeat("h", 48))
	aws.SetSecret("otpguard/redis", rb.password)
	aws.SetParameter("/otpguard/config", cognitoConfig)
	aws.AddKMSKeyMaterial(sampleKeyARN, sampleKeyMaterial)
	return aws
}

// senderEvent is a custom sender's event (V1_0) as Cognito sends it.
func senderEvent(kind, source, code string, attrs map[string]string) []byte {
	ev := map[string]any{
		"version": "1", "triggerSource": kind + "_" + source, "region": "us-east-1", "userPoolId": "us-east-1_test",
		"userName": "5f1c2d3e-user", "callerContext": map[string]string{"awsSdkVersion": "aws-sdk-unknown-unknown", "clientId": "appclient"},
		"request": map[string]any{"type": map[string]string{"CustomSMSSender": "customSMSSenderRequestV1", "CustomEmailSender": "customEmailSenderRequestV1"}[kind],
			"code": code, "clientMetadata": map[string]string{}, "userAttributes": attrs},
		"response": map[string]any{},
	}
	if code == "" {
		ev["request"].(map[string]any)["code"] = nil
	}
	b, _ := json.Marshal(ev)
	return b
}

// authEvent is a classic trigger's event.
func authEvent(source, user, client string, request map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"version": "1", "triggerSource": source, "region": "us-east-1", "userPoolId": "us-east-1_test", "userName": user,
		"callerContext": map[string]string{"awsSdkVersion": "aws-sdk-unknown-unknown", "clientId": client},
		"request":       request, "response": map[string]any{},
	})
	return b
}

// TestTheCustomSendersUnderTheRuntimeAPI runs the cognitosend bootstrap
// under the Runtime API on plain Redis and the Serverless double, with
// codes the Encryption SDK encrypted: sends within the limit, nothing sent
// past it (and no error for Cognito to show), an invitation's password
// unescaped, a code that does not decrypt an error and never a send, and
// no code, address or ciphertext in the logs or metrics.
func TestTheCustomSendersUnderTheRuntimeAPI(t *testing.T) {
	bin := t.TempDir()
	exe := buildBootstrap(t, bin, "cognitosend")
	for _, rb := range lambdaBackends(t) {
		t.Run(rb.name, func(t *testing.T) {
			aws := newTriggerAWS(rb)
			defer aws.Close()
			api, stdout, stderr := startTrigger(t, exe, "cognitosend", triggerEnv(aws, rb))
			phone := map[string]string{"sub": "5f1c2d3e", "phone_number": "+447911123456", "phone_number_verified": "false"}
			codes := encrypt(t, aws, sampleKeyARN, "forbid", "314159", "271828", "161803", "141421", "a&amp;b&lt;c")
			for i, c := range codes[:4] {
				ev := senderEvent("CustomSMSSender", []string{"SignUp", "ResendCode"}[i%2], c, phone)
				out := api.invokeRaw(t, fmt.Sprintf("sms-%d", i), ev)
				if out.isErr || !bytes.Equal(out.body, ev) {
					t.Fatalf("send %d: the trigger answered %s (err %v), want the event back", i, out.body, out.isErr)
				}
			}
			sms := aws.SMS()
			if len(sms) != 3 {
				t.Fatalf("%d SMS sent, want 3 (sms-per-destination: 3 an hour)", len(sms))
			}
			for i, m := range sms {
				if m.PhoneNumber != "+447911123456" || !strings.Contains(m.Message, []string{"314159", "271828", "161803"}[i]) {
					t.Errorf("SMS %d: %+v", i, m)
				}
			}
			email := map[string]string{"sub": "5f1c2d3e", "email": "Ann@Example.com", "email_verified": "true"}
			out := api.invokeRaw(t, "invite", senderEvent("CustomEmailSender", "AdminCreateUser", codes[4], email))
			if out.isErr {
				t.Fatalf("invitation: %s", out.body)
			}
			mails := aws.Emails()
			if len(mails) != 1 || !strings.Contains(mails[0].Text, "temporary password is a&b<c") || !strings.Contains(mails[0].HTML, "a&amp;b&lt;c") {
				t.Fatalf("invitation: %+v", mails)
			}
			// an account-takeover notification carries no code and is
			// never limited
			for i := range 8 {
				if out := api.invokeRaw(t, fmt.Sprintf("ato-%d", i), senderEvent("CustomEmailSender", "AccountTakeOverNotification", "", email)); out.isErr {
					t.Fatalf("notification %d: %s", i, out.body)
				}
			}
			if n := len(aws.Emails()); n != 9 {
				t.Fatalf("%d emails, want 9", n)
			}
			// tampered: an error, nothing sent, the ciphertext not logged
			raw, _ := base64.StdEncoding.DecodeString(encrypt(t, aws, sampleKeyARN, "forbid", "999999")[0])
			raw[len(raw)/2] ^= 1
			bad := base64.StdEncoding.EncodeToString(raw)
			out = api.invokeRaw(t, "tampered", senderEvent("CustomEmailSender", "ForgotPassword", bad, email))
			if !out.isErr {
				t.Fatalf("a tampered code was answered %s", out.body)
			}
			if n := len(aws.Emails()); n != 9 {
				t.Fatalf("a tampered code was sent: %d emails", n)
			}
			logs := waitFor(stderr, `"requestId":"tampered"`)
			for _, secret := range []string{"314159", "271828", "161803", "141421", "a&b<c", "a&amp;b", "447911123456", "7911", "Ann@Example", "ann@example", bad[:40], codes[0][:40]} {
				// (a secret of digits alone counts where no digit or
				// decimal point touches it: a timestamp, an id or a
				// duration may hold any four digits, 7911 included)
				found := regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(secret) + `([^0-9.]|$)`)
				if strings.Trim(secret, "0123456789") != "" {
					found = regexp.MustCompile(regexp.QuoteMeta(secret))
				}
				for _, out := range []string{logs, stdout.String()} {
					if at := found.FindStringIndex(out); at != nil {
						t.Errorf("%q is in the function's output: …%s…", secret, out[max(0, at[0]-60):min(len(out), at[1]+60)])
					}
				}
			}
			if !strings.Contains(logs, `"deniedBy":"sms-per-destination"`) {
				t.Errorf("the denial is not in the decision records:\n%s", logs)
			}
			if !strings.Contains(waitFor(stdout, `"rate_limited"`), `"rate_limited"`) {
				t.Errorf("the denial is not in the metrics:\n%s", stdout.String())
			}
		})
	}
}

// TestTheAuthTriggersUnderTheRuntimeAPI runs the cognitoauth bootstrap:
// PreSignUp's limit per address; PreAuthentication counts each attempt
// as a failure until PostAuthentication gives it back, so wrong passwords
// lock the account and right ones never do; the refusal's text says when
// to retry and is the same for an unknown user (userNotFound); a client
// address is taken from a trusted client only; PostConfirmation settles
// the sign-up message's receipt.
func TestTheAuthTriggersUnderTheRuntimeAPI(t *testing.T) {
	bin := t.TempDir()
	exe := buildBootstrap(t, bin, "cognitoauth")
	send := buildBootstrap(t, bin, "cognitosend")
	for _, rb := range lambdaBackends(t) {
		t.Run(rb.name, func(t *testing.T) {
			aws := newTriggerAWS(rb)
			defer aws.Close()
			env := triggerEnv(aws, rb)
			delete(env, "COGNITO_KMS_KEY_ARN")
			delete(env, "SES_FROM")
			delete(env, "SMS_SENDER_ID")
			api, _, stderr := startTrigger(t, exe, "cognitoauth", env)
			signup := func(id, email string) result {
				return api.invokeRaw(t, id, authEvent("PreSignUp_SignUp", "new-user", "appclient",
					map[string]any{"userAttributes": map[string]string{"email": email}, "validationData": nil}))
			}
			for i := range 2 {
				if out := signup(fmt.Sprintf("su-%d", i), "Bob@Example.com"); out.isErr {
					t.Fatalf("sign-up %d: %s", i, out.body)
				}
			}
			out := signup("su-2", "bob@example.com")
			if !out.isErr || !strings.Contains(string(out.body), "Too many attempts. Try again in") {
				t.Fatalf("the third sign-up for the address: %s", out.body)
			}
			if out := signup("su-other", "carol@example.com"); out.isErr {
				t.Fatalf("another address: %s", out.body)
			}

			pre := func(id, user string, request map[string]any) result {
				return api.invokeRaw(t, id, authEvent("PreAuthentication_Authentication", user, "appclient", request))
			}
			post := func(id, user string) result {
				return api.invokeRaw(t, id, authEvent("PostAuthentication_Authentication", user, "appclient",
					map[string]any{"userAttributes": map[string]string{}, "newDeviceUsed": false}))
			}
			// right passwords: pre and post, twenty times, never locked
			for i := range 20 {
				if out := pre(fmt.Sprintf("ok-pre-%d", i), "dana", map[string]any{"userNotFound": false}); out.isErr {
					t.Fatalf("login %d with the right password: %s", i, out.body)
				}
				if out := post(fmt.Sprintf("ok-post-%d", i), "dana"); out.isErr {
					t.Fatalf("post authentication %d: %s", i, out.body)
				}
			}
			// wrong passwords: pre only; the fourth is refused
			var texts []string
			for _, user := range []string{"erin", "ghost"} {
				for i := range 3 {
					if out := pre(fmt.Sprintf("%s-%d", user, i), user, map[string]any{"userNotFound": user == "ghost"}); out.isErr {
						t.Fatalf("%s attempt %d: %s", user, i, out.body)
					}
				}
				out := pre(user+"-3", user, map[string]any{"userNotFound": user == "ghost"})
				if !out.isErr {
					t.Fatalf("%s: the fourth failed attempt was admitted", user)
				}
				texts = append(texts, string(out.body))
			}
			if texts[0] != texts[1] || !strings.Contains(texts[0], "Too many attempts") {
				t.Errorf("refusals differ between a real and an unknown user: %q vs %q", texts[0], texts[1])
			}

			// the client address: a trusted client's counts on login-per-ip,
			// anyone else's is ignored
			_ = api.invokeRaw(t, "ip-untrusted", authEvent("PreAuthentication_Authentication", "frank", "appclient",
				map[string]any{"validationData": map[string]string{"otpguard:ip": "198.51.100.7"}}))
			untrusted := waitFor(stderr, `"requestId":"ip-untrusted"`)
			_ = api.invokeRaw(t, "ip-trusted", authEvent("PreAuthentication_Authentication", "frank", "backendclient",
				map[string]any{"validationData": map[string]string{"otpguard:ip": "198.51.100.7"}}))
			trusted := waitFor(stderr, `"requestId":"ip-trusted"`)
			if rec := record(untrusted, "ip-untrusted"); !strings.Contains(rec, `"ip":""`) {
				t.Errorf("an untrusted client's address was used: %s", rec)
			}
			if rec := record(trusted, "ip-trusted"); strings.Contains(rec, `"ip":""`) || !strings.Contains(rec, "login-per-ip=") {
				t.Errorf("a trusted client's address was not used: %s", rec)
			}

			// PostConfirmation settles the receipt a custom sender kept
			senv := triggerEnv(aws, rb)
			sapi, _, _ := startTrigger(t, send, "cognitosend", senv)
			code := encrypt(t, aws, sampleKeyARN, "forbid", "424242")[0]
			if out := sapi.invokeRaw(t, "signup-code", senderEvent("CustomEmailSender", "SignUp", code, map[string]string{"email": "hana@example.com"})); out.isErr {
				t.Fatalf("sign-up code: %s", out.body)
			}
			receipts := func() int { return len(keysLike(t, rb, ":cr")) }
			if receipts() != 1 {
				t.Fatalf("%d receipts kept after a sign-up message, want 1", receipts())
			}
			conf := authEvent("PostConfirmation_ConfirmSignUp", "hana", "appclient", map[string]any{"userAttributes": map[string]string{"email": "hana@example.com", "email_verified": "true"}})
			if out := api.invokeRaw(t, "confirm", conf); out.isErr || !bytes.Equal(out.body, conf) {
				t.Fatalf("post confirmation: %s", out.body)
			}
			if receipts() != 0 {
				t.Fatal("the receipt is still there after the confirmation")
			}
			logs := waitFor(stderr, `"requestId":"confirm"`)
			for _, clear := range []string{"Bob@Example", "bob@example", "carol@example", "hana@example", "198.51.100.7", `"dana"`, `"erin"`, `"ghost"`} {
				if strings.Contains(logs, clear) {
					t.Errorf("%s is in the function's logs", clear)
				}
			}
		})
	}
}

// record is the decision record of request id in logs.
func record(logs, id string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"requestId":"`+id+`"`) && strings.Contains(l, `"msg":"decision"`) {
			return l
		}
	}
	return ""
}

// keysLike lists the guard keys whose name contains part, on rb.
func keysLike(t *testing.T, rb lambdaRedis, part string) []string {
	t.Helper()
	var out []string
	for _, k := range rb.admin.Keys(context.Background(), "og:*").Val() {
		if strings.Contains(k, part) {
			out = append(out, k)
		}
	}
	return out
}

// startTrigger starts a trigger bootstrap with env under a Runtime API.
func startTrigger(t *testing.T, exe, name string, env map[string]string) (*runtimeAPI, *testutil.Buffer, *testutil.Buffer) {
	t.Helper()
	api := newRuntimeAPI()
	t.Cleanup(api.Close)
	cmd := exec.Command(exe)
	var stdout, stderr testutil.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = []string{"AWS_LAMBDA_RUNTIME_API=" + strings.TrimPrefix(api.URL, "http://"),
		"AWS_LAMBDA_FUNCTION_NAME=otpguard-" + name, "AWS_LAMBDA_FUNCTION_VERSION=$LATEST", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	select {
	case <-api.firstNext:
	case msg := <-api.initErr:
		t.Fatalf("init error: %s\n%s", msg, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("the bootstrap never asked for an invocation; stderr:\n%s", stderr.String())
	}
	return api, &stdout, &stderr
}

// invokeRaw hands the running function one event and returns its answer.
func (r *runtimeAPI) invokeRaw(t testing.TB, id string, event []byte) result {
	t.Helper()
	ch := make(chan result, 1)
	r.mu.Lock()
	r.results[id] = ch
	r.mu.Unlock()
	select {
	case r.events <- invocation{id, event}:
	case <-time.After(15 * time.Second):
		t.Fatal("the function never asked for the next invocation")
	}
	select {
	case res := <-ch:
		return res
	case <-time.After(15 * time.Second):
		t.Fatal("no response within 15s")
	}
	return result{}
}

// TestEachTriggerHoldsItsLimitUnder50ParallelInvocations: fifty
// invocations at once of each limited trigger's handler (as fifty
// containers would run them; a bootstrap serves one at a time) for one
// subject admit exactly the limit, on plain Redis and the Serverless
// double: the custom SMS and email senders send 3 (sms-per-destination,
// email-per-account), PreSignUp admits 2 (signup-per-destination),
// PreAuthentication 3 failures (login-per-account).
func TestEachTriggerHoldsItsLimitUnder50ParallelInvocations(t *testing.T) {
	for _, rb := range lambdaBackends(t) {
		t.Run(rb.name, func(t *testing.T) {
			aws := newTriggerAWS(rb)
			defer aws.Close()
			env := triggerEnv(aws, rb)
			var stderr testutil.Buffer
			handler := func(fn lambdaapp.Function) func(context.Context, json.RawMessage) (json.RawMessage, error) {
				return lambdaapp.TriggerHandler(lambdaapp.Start(context.Background(), fn,
					lambdaapp.Parts{Senders: delivery.Senders, Trigger: triggers.Build}, func(k string) string { return env[k] }, &testutil.Buffer{}, &stderr))
			}
			send, auth := handler(lambdaapp.Cognitosend), handler(lambdaapp.Cognitoauth)
			codes := encrypt(t, aws, sampleKeyARN, "forbid", strings.Split(strings.Repeat("123456 ", 100), " ")[:100]...)
			cases := []struct {
				name    string
				handle  func(context.Context, json.RawMessage) (json.RawMessage, error)
				event   func(i int) []byte
				counted func(ok int) int // what the test counts: SMS, emails, or answers without error
				want    int
			}{
				{"CustomSMSSender", send, func(i int) []byte {
					return senderEvent("CustomSMSSender", "SignUp", codes[i], map[string]string{"phone_number": "+447911123456"})
				}, func(int) int { return len(aws.SMS()) }, 3},
				{"CustomEmailSender", send, func(i int) []byte {
					ev := senderEvent("CustomEmailSender", "ForgotPassword", codes[50+i], map[string]string{"email": fmt.Sprintf("user%d@example.com", i)})
					return bytes.Replace(ev, []byte(`"5f1c2d3e-user"`), []byte(`"one-account"`), 1)
				}, func(int) int { return len(aws.Emails()) }, 5},
				{"PreSignUp", auth, func(int) []byte {
					return authEvent("PreSignUp_SignUp", "zed", "appclient", map[string]any{"userAttributes": map[string]string{"email": "zed@example.com"}})
				}, func(ok int) int { return ok }, 2},
				{"PreAuthentication", auth, func(int) []byte {
					return authEvent("PreAuthentication_Authentication", "yves", "appclient", map[string]any{"userNotFound": false})
				}, func(ok int) int { return ok }, 3},
			}
			for _, c := range cases {
				var wg sync.WaitGroup
				var ok atomic.Int64
				start := make(chan struct{})
				for i := range 50 {
					wg.Go(func() {
						<-start
						_, err := c.handle(context.Background(), c.event(i))
						if err == nil {
							ok.Add(1)
						} else if !strings.Contains(err.Error(), "Too many attempts") {
							t.Errorf("%s invocation %d: %v", c.name, i, err)
						}
					})
				}
				close(start)
				wg.Wait()
				if got := c.counted(int(ok.Load())); got != c.want {
					t.Errorf("%s: %d of 50 parallel invocations got through, want exactly %d\n%s", c.name, got, c.want, stderr.String())
				}
			}
		})
	}
}

// triggerSamples is each events/cognito/*.json: the function that
// answers it, and the sample code its encrypted code holds.
var triggerSamples = map[string]struct{ fn, code string }{
	"custom-sms-sender.json":   {"cognitosend", "123456"},
	"custom-email-sender.json": {"cognitosend", "654321"},
	"pre-signup.json":          {"cognitoauth", ""},
	"pre-authentication.json":  {"cognitoauth", ""},
	"post-authentication.json": {"cognitoauth", ""},
	"post-confirmation.json":   {"cognitoauth", ""},
}

// TestEveryTriggerSampleEventIsAnswered feeds each sample trigger event to
// its bootstrap under the Runtime API: each is answered with itself (no
// error), and the senders' encrypted codes (under the sample key's fixed
// material) decrypt and go out. -update-events encrypts them again.
func TestEveryTriggerSampleEventIsAnswered(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(root, "events", "cognito", "*.json"))
	if len(files) != len(triggerSamples) {
		t.Fatalf("%d sample trigger events, %d expected: every events/cognito/*.json needs an entry", len(files), len(triggerSamples))
	}
	rb := lambdaBackends(t)[1] // the Serverless double
	aws := newTriggerAWS(rb)
	defer aws.Close()
	bin := t.TempDir()
	apis := map[string]*runtimeAPI{}
	for _, fn := range []string{"cognitosend", "cognitoauth"} {
		apis[fn], _, _ = startTrigger(t, buildBootstrap(t, bin, fn), fn, triggerEnv(aws, rb))
	}
	for _, f := range files {
		s := triggerSamples[filepath.Base(f)]
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if *updateEvents && s.code != "" {
			var ev map[string]any
			_ = json.Unmarshal(raw, &ev)
			ev["request"].(map[string]any)["code"] = encrypt(t, aws, sampleKeyARN, "forbid", s.code)[0]
			raw, _ = json.MarshalIndent(ev, "", "  ")
			raw = append(raw, '\n')
			if err := os.WriteFile(f, raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out := apis[s.fn].invokeRaw(t, filepath.Base(f), raw)
		if out.isErr || !json.Valid(out.body) || !bytes.Equal(compact(t, out.body), compact(t, raw)) {
			t.Errorf("%s: answered %s (error %v), want the event back", filepath.Base(f), out.body, out.isErr)
		}
	}
	sms, mails := aws.SMS(), aws.Emails()
	if len(sms) != 1 || !strings.Contains(sms[0].Message, "123456") || len(mails) != 1 || !strings.Contains(mails[0].Text, "654321") {
		t.Errorf("the samples' codes were not sent: %+v %+v", sms, mails)
	}
}

func compact(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
