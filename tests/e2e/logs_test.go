package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// The identifiers the log test sends, and what must never appear in the
// log (compared in lower case): the address as typed and as counted, the
// phone's digits, the client's address and its /24, the account.
const (
	logEmail   = "Ivy.Quill+Tag@ClearMail.Example"
	logPhone   = "+1 415 555 0148"
	logIP      = "198.51.100.77"
	logAccount = "Quentin.Vale"
)

var logNeedles = []string{"ivy.quill", "ivyquill", "clearmail", "4155550148", "415 555", "198.51.100.77", "198.51.100.", "quentin.vale", "quentinvale"}

// TestNoClearIdentifierInAnyLogLine runs every route of the API (a table
// that must cover api.Routes(), so a new route fails this test until it
// is added) with an email, a phone, an IP and an account in the body, the
// path and X-Forwarded-For, first with Redis running and then with Redis
// stopped (every store call failing: the error paths), and greps the
// server's whole log for each identifier in any case. It also checks that
// the error paths ran: the internal routes logged their store errors.
func TestNoClearIdentifierInAnyLogLine(t *testing.T) {
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	const admin = "admin-token-for-the-log-test"
	s := start(t, "redis://"+rs.Addr, behindProxy, "AUTH=local", "ADMIN_TOKEN="+admin)
	xff := []string{"X-Forwarded-For", logIP}
	internal := append([]string{"Authorization", "Bearer " + admin}, xff...)
	subject := map[string]string{"account": logAccount, "ip": logIP, "email": logEmail}
	phoneSubject := map[string]string{"account": logAccount, "ip": logIP, "phone": logPhone}
	esc := url.PathEscape

	type call struct {
		method, path string
		body         any
		header       []string
	}
	// route (method and pattern) -> the calls made to it
	calls := map[string][]call{
		"POST /v1/otp/send": {
			{"POST", "/v1/otp/send", map[string]string{"channel": "email", "to": logEmail, "purpose": "login"}, xff},
			{"POST", "/v1/otp/send", map[string]string{"channel": "sms", "to": logPhone, "purpose": "login"}, xff},
		},
		"POST /v1/otp/verify": {
			{"POST", "/v1/otp/verify", map[string]string{"to": logEmail, "purpose": "login", "code": "123456"}, xff},
			{"POST", "/v1/otp/verify", map[string]string{"to": logPhone, "purpose": "login", "code": "123456"}, xff},
		},
		"POST /v1/signup": {
			{"POST", "/v1/signup", map[string]string{"email": logEmail, "password": goodPassword}, xff},
		},
		"POST /v1/login": {
			{"POST", "/v1/login", map[string]string{"username": logAccount, "password": "not the password at all"}, xff},
			{"POST", "/v1/login", map[string]string{"username": logEmail, "password": "not the password at all"}, xff},
			{"POST", "/v1/login", map[string]string{"username": logEmail, "password": goodPassword}, xff},
		},
		"POST /v1/login/challenge": {
			{"POST", "/v1/login/challenge", map[string]string{"session": "not-a-session", "code": "123456"}, xff},
		},
		"GET /.well-known/jwks.json": {{"GET", "/.well-known/jwks.json", nil, xff}},
		"GET /healthz":               {{"GET", "/healthz", nil, xff}},
		"POST /v1/decisions": {
			{"POST", "/v1/decisions", map[string]any{"action": "login", "subject": subject}, internal},
			{"POST", "/v1/decisions", map[string]any{"action": "otp.send", "subject": phoneSubject}, internal},
		},
		"POST /v1/outcomes": {
			{"POST", "/v1/outcomes", map[string]any{"action": "login", "subject": subject, "outcome": "failure"}, internal},
			{"POST", "/v1/outcomes", map[string]any{"action": "login", "subject": subject, "outcome": "success", "issueDevice": true}, internal},
		},
		"DELETE /v1/devices/{account}": {
			{"DELETE", "/v1/devices/" + esc(logAccount), nil, internal},
			{"DELETE", "/v1/devices/" + esc(logEmail), nil, internal},
		},
	}
	for _, m := range []string{"GET", "DELETE"} {
		route := m + " /v1/blocks/{dimension}/{value}"
		for _, dv := range [][2]string{{"account", logAccount}, {"destination", logEmail}, {"destination", logPhone}, {"ip", logIP},
			{"ip24", logIP}, {"prefix", logPhone}, {"nosuchdimension", logEmail}} {
			calls[route] = append(calls[route], call{m, "/v1/blocks/" + dv[0] + "/" + esc(dv[1]), nil, internal})
		}
	}
	for _, r := range api.Routes() {
		if len(calls[r.Method+" "+r.Path]) == 0 {
			t.Errorf("the API's route %s %s is not run by this test: add it", r.Method, r.Path)
		}
	}
	run := func(phase string) {
		t.Helper()
		statuses := map[int]int{}
		for route, cs := range calls {
			for _, c := range cs {
				body := ""
				if c.body != nil {
					b, _ := json.Marshal(c.body)
					body = string(b)
				}
				r := s.do(t, c.method, c.path, body, c.header...)
				statuses[r.status]++
				if r.status >= 500 && r.status != http.StatusServiceUnavailable {
					t.Errorf("%s, %s %s: %d %s", phase, route, c.path, r.status, r.raw)
				}
			}
		}
		t.Logf("Redis %s: answers by status %v", phase, statuses)
	}

	// Redis running: a registered account, so that the login with the
	// right password goes through (and its step-up, when a rule asks)
	if r := s.signup(t, logEmail, goodPassword, logIP); r.status != 202 {
		t.Fatalf("signup: %d %s", r.status, r.raw)
	}
	if r := s.verify(t, logEmail, "signup", s.lastCode(t, delivered(logEmail))); r.status != 200 {
		t.Fatalf("confirm: %d %s", r.status, r.raw)
	}
	run("running")
	if r := s.login(t, logEmail, goodPassword, logIP); r.str("session") != "" {
		s.challenge(t, r.str("session"), s.lastCode(t, delivered(logEmail)))
	}
	rs.Stop()
	run("stopped")

	logs := s.logs.String()
	lower := strings.ToLower(logs)
	for _, n := range logNeedles {
		if i := strings.Index(lower, n); i >= 0 {
			start := strings.LastIndex(logs[:i], "\n") + 1
			end := i + strings.Index(logs[i:]+"\n", "\n")
			t.Errorf("the log holds %q: %s", n, logs[start:end])
		}
	}
	// the error paths ran and logged
	for _, want := range []string{`"msg":"internal route"`, `"msg":"store unavailable`} {
		if !strings.Contains(logs, want) {
			t.Errorf("no log line with %s: the error paths did not run", want)
		}
	}
	// by route, never by path
	for _, want := range []string{`"route":"/v1/blocks/{dimension}/{value}"`, `"route":"/v1/devices/{account}"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("no log line with %s", want)
		}
	}
	t.Logf("%d log lines checked", strings.Count(logs, "\n"))
}
