package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/console"
)

// consoleSecurityConfig is consoleConfig with a rule on untrusted devices,
// so that a decision tells whether a device token is still trusted.
const consoleSecurityConfig = consoleConfig + `  - {name: login-untrusted-device, action: login, when: {device: untrusted}, key: [account], limit: 100, window: 1h}
`

// TestAForeignPageCannotDriveTheConsole attacks the built console, which
// holds the server's ADMIN_TOKEN, as the probe did: every change
// route receives a cross-site form post (as a browser sends it from
// another site: Origin and Sec-Fetch-Site cross-site, no cookie), the same
// with the session cookie (as a page on another port of 127.0.0.1, which
// is same-site, would send it), and JSON without the secret; the issue's
// documents are among them (one no-op rule, a CAPTCHA verifyUrl on the
// attacker, trustedProxies 0.0.0.0/0). Each is refused, and the server's
// state after is what it was: the running document and its history, the
// locked account still locked, the device token still trusted. A foreign
// Host (DNS rebinding) reads nothing, with or without the cookie. The
// console's own page, with its cookie and origin, still changes things.
func TestAForeignPageCannotDriveTheConsole(t *testing.T) {
	const admin = "admin-token-for-the-attack-test"
	s := start(t, backends()[0].redisURL, consoleSecurityConfig, "AUTH=local", "ADMIN_TOKEN="+admin)
	auth := []string{"Authorization", "Bearer " + admin}
	s.register(t, "ann@example.com", goodPassword, "198.51.100.1")
	s.register(t, "bob@example.com", goodPassword, "198.51.100.2")
	for range 3 {
		s.login(t, "ann@example.com", "wrong password entirely", "203.0.113.5")
	}
	bob := s.login(t, "bob@example.com", goodPassword, "198.51.100.2")
	device := bob.str("deviceToken")
	if bob.status != 200 || device == "" {
		t.Fatalf("bob's login: %d %s", bob.status, bob.raw)
	}
	con := startConsole(t, s, admin)

	// the operator's browser, logged in with the printed URL; a legitimate
	// change first, so that a rollback would show
	jar, _ := cookiejar.New(nil)
	operator := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, err := operator.Get(con.login()); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login with the printed URL: %v %v", resp, err)
	}
	cookies := jar.Cookies(mustParse(t, con.url))
	if len(cookies) != 1 {
		t.Fatalf("the session cookies: %v", cookies)
	}
	cookie := cookies[0].Name + "=" + cookies[0].Value
	v2 := consoleSecurityConfig + "  - {name: signup-per-ip-v2, action: signup, key: [ip], limit: 7, window: 1h}\n"
	if code, body := consolePost(t, operator, con.url+"/config/apply", "application/json", jsonDoc(v2), map[string]string{"Origin": con.url}); code != 200 {
		t.Fatalf("the operator's apply: %d %s", code, body)
	}
	state := func() string {
		t.Helper()
		cfg := s.do(t, "GET", "/v1/console/config", "", auth...)
		var c struct {
			Document string
			History  []struct{ N int }
		}
		_ = json.Unmarshal([]byte(cfg.raw), &c)
		ann := s.do(t, "GET", "/v1/blocks/account/ann@example.com", "", auth...)
		dev := s.post(t, "/v1/decisions", map[string]any{"action": "login", "subject": map[string]string{"account": "bob@example.com", "ip": "198.51.100.2", "device": device}}, auth...)
		return strings.Join([]string{
			"document " + console.DocID(c.Document), "versions " + strings.Repeat("v", len(c.History)),
			"ann locked " + boolString(strings.Contains(ann.raw, `"locked":true`)), "bob's device " + dev.str("device"),
		}, ", ")
	}
	before := state()
	if want := "document " + console.DocID(v2) + ", versions vv, ann locked true, bob's device trusted"; before != want {
		t.Fatalf("the state before the attacks: %s, want %s", before, want)
	}

	noop := "rules:\n  - {name: noop, action: nothing, key: [global], limit: 1000000, window: 1s}\n"
	captcha := "challenge: {captcha: {provider: turnstile, siteKey: k, verifyUrl: 'http://attacker.example/siteverify'}}\n"
	proxies := "network: {trustedProxies: [0.0.0.0/0]}\n"
	changes := map[string][]url.Values{
		"/config/apply":    {{"document": {noop}}, {"document": {captcha}}, {"document": {proxies}}},
		"/config/rollback": {{"version": {"1"}}},
		"/subject/unblock": {{"dimension": {"account"}, "value": {"ann@example.com"}}},
		"/subject/revoke":  {{"value": {"bob@example.com"}}},
		"/config/validate": {{"document": {noop}}},
		"/config/simulate": {{"document": {noop}}},
	}
	for _, path := range console.Changes() {
		if len(changes[path]) == 0 {
			t.Fatalf("the console's change %s is not attacked by this test: add it", path)
		}
	}
	anyone := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	crossSite := map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
	sameSite := map[string]string{"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site", "Cookie": cookie}
	for path, forms := range changes {
		for _, f := range forms {
			js := map[string]any{}
			for k := range f {
				js[k] = f.Get(k)
				if k == "version" {
					js[k] = 1
				}
			}
			body, _ := json.Marshal(js)
			for _, a := range []struct {
				name, ctype, body string
				header            map[string]string
			}{
				{"a cross-site form post", "application/x-www-form-urlencoded", f.Encode(), crossSite},
				{"a form post from another port, with the cookie", "application/x-www-form-urlencoded", f.Encode(), sameSite},
				{"JSON from another port, with the cookie", "application/json", string(body), sameSite},
				{"JSON without the secret", "application/json", string(body), map[string]string{"Origin": con.url, "Sec-Fetch-Site": "same-origin"}},
			} {
				code, raw := consolePost(t, anyone, con.url+path, a.ctype, a.body, a.header)
				if code != 401 && code != 403 {
					t.Errorf("%s to %s: %d %s", a.name, path, code, raw)
				}
			}
		}
	}
	// DNS rebinding: the console's port under another name
	port := con.url[strings.LastIndexByte(con.url, ':')+1:]
	for _, withCookie := range []bool{false, true} {
		req, _ := http.NewRequest("GET", con.url+"/config", nil)
		req.Host = "attacker.example:" + port
		if withCookie {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := anyone.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get("Content-Type") != "application/problem+json" || strings.Contains(string(raw), "login-per-account") {
			t.Errorf("GET /config with Host attacker.example (cookie %v): %d %s", withCookie, resp.StatusCode, raw)
		}
	}
	if after := state(); after != before {
		t.Fatalf("the attacks changed the server's state:\n before %s\n after  %s", before, after)
	}

	// the console's own page still changes things
	if code, body := consolePost(t, operator, con.url+"/subject/unblock", "application/json", `{"dimension":"account","value":"ann@example.com"}`, map[string]string{"Origin": con.url, "Sec-Fetch-Site": "same-origin"}); code != 200 {
		t.Fatalf("the operator's unblock: %d %s", code, body)
	}
	if after := state(); !strings.Contains(after, "ann locked false") {
		t.Fatalf("after the operator's unblock: %s", after)
	}
}

func consolePost(t *testing.T, c *http.Client, u, ctype, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func jsonDoc(doc string) string {
	b, _ := json.Marshal(map[string]string{"document": doc})
	return string(b)
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
