package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/otpguard/otpguard/internal/console"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
)

// TestTheConsoleOnAStack: the console against a deployed stack, through
// the real SDK clients (SSM, CloudWatch) pointed at the fake endpoint and
// SigV4-signed calls to the API's internal routes: the Rules page shows
// the Decisions metrics GetMetricData returns per rule and outcome; the
// Config page shows the parameter and its history with who changed it;
// apply puts a valid document (and never an invalid one), rollback puts
// an old version again; the Subject page and unblock go to the internal
// routes with the operator's signature; credentials that cannot read the
// parameter are told so.
func TestTheConsoleOnAStack(t *testing.T) {
	aws_ := awsfake.New()
	defer aws_.Close()
	const param = "/shop/otpguard/config"
	first := "rules:\n  - {name: login-per-account, action: login, key: [account], limit: 20, window: 1h, count: failures}\n" +
		"  - {name: otp-per-destination, action: otp.send, key: [destination], limit: 3, window: 1h}\n"
	aws_.SetParameter(param, first)
	now := time.Now()
	dims := func(rule, action, outcome string) map[string]string {
		return map[string]string{"Stack": "shop", "Action": action, "Rule": rule, "Outcome": outcome}
	}
	aws_.SetMetric("otpguard", "Decisions", dims("login-per-account", "login", "denied"), now.Add(-3*time.Minute), 5)
	aws_.SetMetric("otpguard", "Decisions", dims("login-per-account", "login", "allowed"), now.Add(-10*time.Minute), 7)
	aws_.SetMetric("otpguard", "Decisions", dims("login-per-account", "login", "allowed"), now.Add(-5*time.Hour), 11)
	aws_.SetMetric("otpguard", "Decisions", dims("login-per-account", "login", "denied"), now.Add(-3*time.Minute), 100)
	aws_.SetMetric("otpguard", "Decisions", map[string]string{"Stack": "other-stack", "Action": "login", "Rule": "login-per-account", "Outcome": "denied"}, now.Add(-3*time.Minute), 1000)

	// the API's internal routes: IAM checks the signature; this fake
	// records what it received
	var mu sync.Mutex
	var calls []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		if !regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=AKIDCONSOLE/\d{8}/us-east-1/execute-api/aws4_request, SignedHeaders=\S+, Signature=[0-9a-f]{64}$`).MatchString(auth) {
			w.WriteHeader(403)
			_, _ = io.WriteString(w, `{"message":"Missing Authentication Token"}`)
			return
		}
		if r.Method == "DELETE" {
			w.WriteHeader(204)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"rules":[{"name":"login-per-account","remaining":0,"resetAfter":3000,"locked":true,"lockedFor":60}]}`)
	}))
	defer api.Close()

	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(aws_.URL), Credentials: credentials.NewStaticCredentialsProvider("AKIDCONSOLE", "secret", "")}
	secret := console.NewSecret()
	ui := httptest.NewServer((&console.UI{Backend: &console.AWS{AWSConfig: cfg, Stack: "shop", Parameter: param, API: api.URL}, Secret: secret}).Handler())
	defer ui.Close()
	// the operator's browser: the printed URL's token becomes its cookie
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, err := browser.Get(ui.URL + "/?token=" + secret); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %v %v", resp, err)
	}
	get := func(path string) string {
		t.Helper()
		resp, err := browser.Get(ui.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	// post sends a change as the console's page does: JSON, from its origin
	post := func(path string, body map[string]any) (int, string) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", ui.URL+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", ui.URL)
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}

	// Rules: the stack's Decisions per rule, from CloudWatch
	rules := get("/")
	row := regexp.MustCompile(`(?s)<tr data-rule="login-per-account">.*?</tr>`).FindString(rules)
	if !strings.Contains(row, "<td>7 / 18</td>") || !strings.Contains(row, `<td class="denied">105 / 105</td>`) || !strings.Contains(row, "<svg") {
		t.Fatalf("the Rules page's row from CloudWatch: %s", row)
	}
	if aws_.CallsOf("cloudwatch:GetMetricData") == 0 {
		t.Fatal("no GetMetricData call")
	}

	// Config: the parameter and its history with who changed it
	page := get("/config")
	if !strings.Contains(page, "login-per-account") || !strings.Contains(page, "arn:aws:iam::123456789012:user/deployer") || !strings.Contains(page, "the SSM parameter "+param) {
		t.Fatalf("the Config page: %s", page)
	}
	// an invalid document is never put
	if code, body := post("/config/apply", map[string]any{"document": "rules: [{name: x, action: login, key: [nothing], limit: 1, window: 1h}]"}); code != 400 || !strings.Contains(body, "rules[0] (x).key[0]") {
		t.Fatalf("an invalid apply: %d %s", code, body)
	}
	if n := aws_.CallsOf("ssm:PutParameter"); n != 0 {
		t.Fatalf("%d PutParameter calls for an invalid document", n)
	}
	second := strings.Replace(first, "limit: 20", "limit: 10", 1)
	if code, body := post("/config/apply", map[string]any{"document": second}); code != 200 || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("apply: %d %s", code, body)
	}
	if page := get("/config"); !strings.Contains(page, "limit: 10") || !strings.Contains(page, "assumed-role/ops/alice") {
		t.Fatalf("after apply, the Config page: %s", page)
	}
	if code, body := post("/config/rollback", map[string]any{"version": 1}); code != 200 || !strings.Contains(body, `"next":"/config"`) {
		t.Fatalf("rollback: %d %s", code, body)
	}
	if page := get("/config"); !strings.Contains(page, `id="flash">rolled back to version 1<`) {
		t.Fatalf("after the rollback, the flash: %s", page)
	}
	if page := get("/config"); !strings.Contains(page, "limit: 20") {
		t.Fatalf("after the rollback, the running document: %s", page)
	}

	// Subject and unblock: signed calls to the internal routes
	if page := get("/subject?dimension=account&value=ann@example.com"); !strings.Contains(page, `<strong class="locked">locked</strong>`) {
		t.Fatalf("the Subject page: %s", page)
	}
	if code, body := post("/subject/unblock", map[string]any{"dimension": "account", "value": "ann@example.com"}); code != 200 || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("unblock: %d %s", code, body)
	}
	mu.Lock()
	got := strings.Join(calls, ", ")
	mu.Unlock()
	if got != "GET /v1/blocks/account/ann@example.com, DELETE /v1/blocks/account/ann@example.com" {
		t.Errorf("the internal routes were called: %s", got)
	}

	// credentials that may not read the parameter
	aws_.Deny("ssm:GetParameter", param, true)
	if page := get("/config"); !strings.Contains(page, "AccessDeniedException") || !strings.Contains(page, `id="access">no access<`) {
		t.Errorf("denied credentials: %s", page)
	}
}
