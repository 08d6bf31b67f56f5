package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
)

// fakeBackend is a Backend in memory that records every change.
type fakeBackend struct {
	mu      sync.Mutex
	doc     string
	changes []string
}

func (f *fakeBackend) record(c string) { f.mu.Lock(); f.changes = append(f.changes, c); f.mu.Unlock() }

func (f *fakeBackend) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.changes)
}

func (f *fakeBackend) Access(context.Context) (Access, error) {
	return Access{Read: true, Write: true}, nil
}
func (f *fakeBackend) Stats(context.Context) ([]RuleStats, error) {
	return nil, nil
}
func (f *fakeBackend) Config(context.Context) (ConfigData, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ConfigData{Document: f.doc, ID: DocID(f.doc), File: true, History: []Version{{N: 1, ID: DocID(f.doc)}}}, nil
}
func (f *fakeBackend) Version(_ context.Context, n int) (string, error) {
	if n != 1 {
		return "", fmt.Errorf("no version %d", n)
	}
	return "rules:\n  - {name: v1, action: login, key: [ip], limit: 1, window: 1m}\n", nil
}
func (f *fakeBackend) Apply(_ context.Context, doc string) (string, []string, error) {
	f.record("apply " + DocID(doc))
	f.mu.Lock()
	f.doc = doc
	f.mu.Unlock()
	return DocID(doc), nil, nil
}
func (f *fakeBackend) Status(_ context.Context, dim, value string, out any) (int, error) {
	return 200, json.Unmarshal([]byte(`{"rules":[]}`), out)
}
func (f *fakeBackend) Unblock(_ context.Context, dim, value string, _ any) (int, error) {
	f.record("unblock " + dim + " " + value)
	return 204, nil
}
func (f *fakeBackend) Revoke(_ context.Context, account string, _ any) (int, error) {
	f.record("revoke " + account)
	return 204, nil
}

const testDoc = "rules:\n  - {name: a, action: login, key: [ip], limit: 5, window: 1m}\n"

// testConsole is a console on a loopback port with a fake backend.
type testConsole struct {
	*httptest.Server
	ui      *UI
	backend *fakeBackend
	origin  string // http://127.0.0.1:port
	cookie  *http.Cookie
}

func newTestConsole(t *testing.T) *testConsole {
	t.Helper()
	b := &fakeBackend{doc: testDoc}
	ui := &UI{Backend: b, Secret: NewSecret(), SimUsers: 50}
	srv := httptest.NewServer(ui.Handler())
	t.Cleanup(srv.Close)
	c := &testConsole{Server: srv, ui: ui, backend: b, origin: srv.URL}
	// the browser's login: the printed URL, exchanged for the cookie
	resp := c.request(t, "GET", "/?token="+url.QueryEscape(ui.Secret), "", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, ck := range resp.Cookies() {
		c.cookie = ck
	}
	if c.cookie == nil {
		t.Fatal("login set no cookie")
	}
	return c
}

// request sends a request with the headers given ("Cookie" set to "ok"
// sends the session cookie) and never follows a redirect.
func (c *testConsole) request(t *testing.T, method, path, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, c.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		switch {
		case k == "Cookie" && v == "ok":
			req.AddCookie(c.cookie)
		case k == "Host":
			req.Host = v
		default:
			req.Header.Set(k, v)
		}
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// problemOf reads a problem answer, failing unless it is one.
func problemOf(t *testing.T, resp *http.Response) problem {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	var p problem
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(b, &p) != nil || p.Status != resp.StatusCode || p.Code == "" || p.Type != "urn:otpguard:problem:"+p.Code {
		t.Fatalf("not a problem answer: %d %s %s", resp.StatusCode, ct, b)
	}
	return p
}

// bodies are a valid JSON body for each change, and the same as a form.
var bodies = map[string][2]string{
	"/subject/unblock": {`{"dimension":"account","value":"ann"}`, "dimension=account&value=ann"},
	"/subject/revoke":  {`{"value":"ann"}`, "value=ann"},
	"/config/validate": {`{"document":` + jsonString(testDoc) + `}`, "document=" + url.QueryEscape(testDoc)},
	"/config/apply":    {`{"document":"rules: []\n"}`, "document=rules%3A+%5B%5D%0A"},
	"/config/rollback": {`{"version":1}`, "version=1"},
	"/config/simulate": {`{"document":` + jsonString(testDoc) + `}`, "document=" + url.QueryEscape(testDoc)},
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// Every change (every POST route) is refused, and the backend sees no
// change, unless it carries the session cookie, comes from the console's
// own origin and is JSON: a cross-site form post (with the cookie or
// without, as another port of 127.0.0.1, which is same-site, would send
// it), JSON without the cookie or with a wrong one, JSON from another
// origin or without one, a same-origin form or text/plain post. Then the
// same changes, made right, go through (the test can see a change).
func TestEveryChangeNeedsTheSessionTheOriginAndJSON(t *testing.T) {
	c := newTestConsole(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(c.URL, "http://"))
	form := "application/x-www-form-urlencoded"
	attacks := []struct {
		name   string
		json   bool
		header map[string]string
		code   string
	}{
		{"a cross-site form post", false, map[string]string{"Content-Type": form, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, "cross_origin"},
		{"a cross-site form post with the cookie", false, map[string]string{"Content-Type": form, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Cookie": "ok"}, "cross_origin"},
		{"a form post from another port (same-site)", false, map[string]string{"Content-Type": form, "Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site", "Cookie": "ok"}, "cross_origin"},
		{"JSON from another port (same-site)", true, map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site", "Cookie": "ok"}, "cross_origin"},
		{"JSON with a null origin", true, map[string]string{"Content-Type": "application/json", "Origin": "null", "Cookie": "ok"}, "cross_origin"},
		{"JSON with no Origin", true, map[string]string{"Content-Type": "application/json", "Cookie": "ok"}, "cross_origin"},
		{"JSON with the origin but Sec-Fetch-Site cross-site", true, map[string]string{"Content-Type": "application/json", "Origin": c.origin, "Sec-Fetch-Site": "cross-site", "Cookie": "ok"}, "cross_origin"},
		{"JSON without the secret", true, map[string]string{"Content-Type": "application/json", "Origin": c.origin, "Sec-Fetch-Site": "same-origin"}, "unauthorized"},
		{"JSON with a wrong secret", true, map[string]string{"Content-Type": "application/json", "Origin": c.origin, "Cookie": cookieName(port) + "=" + NewSecret()}, "unauthorized"},
		{"a same-origin form post with the cookie", false, map[string]string{"Content-Type": form, "Origin": c.origin, "Cookie": "ok"}, "unsupported_media_type"},
		{"JSON as text/plain with the cookie", true, map[string]string{"Content-Type": "text/plain", "Origin": c.origin, "Cookie": "ok"}, "unsupported_media_type"},
	}
	if got := Changes(); !slices.Equal(got, []string{"/subject/unblock", "/subject/revoke", "/config/validate", "/config/apply", "/config/rollback", "/config/simulate"}) {
		t.Fatalf("the console's changes are %v: add the new ones to this test", got)
	}
	for _, path := range Changes() {
		for _, a := range attacks {
			body := bodies[path][1]
			if a.json {
				body = bodies[path][0]
			}
			resp := c.request(t, "POST", path, body, a.header)
			if p := problemOf(t, resp); p.Code != a.code {
				t.Errorf("%s to %s: %d %s (%s), want %s", a.name, path, p.Status, p.Code, p.Detail, a.code)
			}
		}
	}
	if got := c.backend.recorded(); len(got) != 0 {
		t.Fatalf("refused requests changed things: %v", got)
	}
	if doc, _ := c.backend.Config(context.Background()); doc.Document != testDoc {
		t.Fatalf("the document changed: %q", doc.Document)
	}
	// made right, each change goes through
	for _, path := range Changes() {
		resp := c.request(t, "POST", path, bodies[path][0], map[string]string{"Content-Type": "application/json; charset=utf-8", "Origin": c.origin, "Sec-Fetch-Site": "same-origin", "Cookie": "ok"})
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Errorf("%s made right: %d %s", path, resp.StatusCode, b)
		}
	}
	want := []string{"unblock account ann", "revoke ann", "apply " + DocID("rules: []\n"), "apply " + DocID("rules:\n  - {name: v1, action: login, key: [ip], limit: 1, window: 1m}\n")}
	if got := c.backend.recorded(); !slices.Equal(got, want) {
		t.Fatalf("the changes made right: %v, want %v", got, want)
	}
}

// Every request must name the address the console listens on (or
// localhost on its port): a page whose name resolves to 127.0.0.1 (DNS
// rebinding) reads nothing, not even with the cookie.
func TestAForeignHostIsRefused(t *testing.T) {
	c := newTestConsole(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(c.URL, "http://"))
	for _, host := range []string{"attacker.example", "attacker.example:" + port, "127.0.0.1", "127.0.0.2:" + port, "127.0.0.1:" + port + ".attacker.example"} {
		for _, path := range []string{"/config", "/", "/subject?dimension=account&value=ann", "/assets/app.js", "/?token=" + c.ui.Secret} {
			resp := c.request(t, "GET", path, "", map[string]string{"Host": host, "Cookie": "ok"})
			if p := problemOf(t, resp); p.Code != "foreign_host" || resp.StatusCode != 403 {
				t.Errorf("GET %s with Host %s: %d %s", path, host, p.Status, p.Code)
			}
		}
		resp := c.request(t, "POST", "/config/apply", bodies["/config/apply"][0], map[string]string{"Host": host, "Origin": "http://" + host, "Content-Type": "application/json", "Cookie": "ok"})
		if p := problemOf(t, resp); p.Code != "foreign_host" {
			t.Errorf("POST with Host %s: %d %s", host, p.Status, p.Code)
		}
	}
	if got := c.backend.recorded(); len(got) != 0 {
		t.Fatalf("refused requests changed things: %v", got)
	}
	for _, host := range []string{strings.TrimPrefix(c.URL, "http://"), "localhost:" + port, "LOCALHOST:" + port} {
		if resp := c.request(t, "GET", "/config", "", map[string]string{"Host": host, "Cookie": "ok"}); resp.StatusCode != 200 {
			t.Errorf("GET /config with Host %s: %d", host, resp.StatusCode)
		}
	}
}

// The Host a request may name: the address the connection was accepted
// on, and localhost on its port when that is a loopback address.
func TestLocalHosts(t *testing.T) {
	for _, c := range []struct {
		addr net.Addr
		want []string
	}{
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8090}, []string{"127.0.0.1:8090", "localhost:8090"}},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 8090}, []string{"[::1]:8090", "localhost:8090"}},
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 8090}, []string{"192.0.2.1:8090"}},
		{nil, nil},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.addr != nil {
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, c.addr))
		}
		if got := localHosts(r); !slices.Equal(got, c.want) {
			t.Errorf("%v: %v, want %v", c.addr, got, c.want)
		}
	}
}

// The token of the printed URL is exchanged for an HttpOnly,
// SameSite=Strict cookie, and the browser sent to the page without it;
// without the cookie no page is served.
func TestTheTokenIsExchangedForAStrictCookie(t *testing.T) {
	c := newTestConsole(t)
	if !c.cookie.HttpOnly || c.cookie.SameSite != http.SameSiteStrictMode || c.cookie.Path != "/" || c.cookie.Value != c.ui.Secret {
		t.Fatalf("the session cookie: %+v", c.cookie)
	}
	for _, path := range []string{"/", "/config", "/subject", "/?token=" + NewSecret(), "/?token="} {
		resp := c.request(t, "GET", path, "", nil)
		if p := problemOf(t, resp); p.Status != 401 || p.Code != "unauthorized" || len(resp.Cookies()) != 0 {
			t.Errorf("GET %s without the cookie: %d %s", path, p.Status, p.Code)
		}
	}
	if resp := c.request(t, "GET", "/config", "", map[string]string{"Cookie": "ok"}); resp.StatusCode != 200 {
		t.Fatalf("GET /config with the cookie: %d", resp.StatusCode)
	}
	// a console with no secret refuses everything
	c.ui.Secret = ""
	if resp := c.request(t, "GET", "/config", "", map[string]string{"Cookie": cookieName("x") + "="}); resp.StatusCode != 401 {
		t.Fatalf("a console without a secret: %d", resp.StatusCode)
	}
}

// The flash is the console's own: what the last change did, shown once;
// a URL parameter cannot make the console say anything.
func TestTheFlashComesFromTheConsolesOwnState(t *testing.T) {
	c := newTestConsole(t)
	page := func(path string) string {
		resp := c.request(t, "GET", path, "", map[string]string{"Cookie": "ok"})
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if p := page("/subject?dimension=account&value=ann&flash=Your+session+expired%3A+call+%2B1+555+0100"); strings.Contains(p, "session expired") || strings.Contains(p, `id="flash"`) {
		t.Fatalf("the page shows the URL's flash: %s", p)
	}
	resp := c.request(t, "POST", "/subject/unblock", bodies["/subject/unblock"][0], map[string]string{"Content-Type": "application/json", "Origin": c.origin, "Cookie": "ok"})
	var out struct {
		OK   bool
		Next string
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || !out.OK || out.Next != "/subject?dimension=account&value=ann" {
		t.Fatalf("unblock: %+v %v", out, err)
	}
	if p := page(out.Next); !strings.Contains(p, `<p class="flash" id="flash">unblocked</p>`) {
		t.Fatalf("the next page: %s", p)
	}
	if p := page(out.Next); strings.Contains(p, `id="flash"`) {
		t.Fatalf("the flash is shown twice: %s", p)
	}
}

// The console's errors are problem+json, as the API's are.
func TestTheConsolesErrorsAreProblems(t *testing.T) {
	c := newTestConsole(t)
	ok := map[string]string{"Content-Type": "application/json", "Origin": c.origin, "Cookie": "ok"}
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/nowhere", "", 404, "not_found"},
		{"DELETE", "/config", "", 405, "method_not_allowed"},
		{"GET", "/config/apply", "", 405, "method_not_allowed"},
		{"POST", "/config/apply", `{"document": 3}`, 400, "invalid_request"},
		{"POST", "/config/apply", `{"doc": "x"}`, 400, "invalid_request"},
		{"POST", "/config/apply", `{}`, 400, "invalid_request"},
		{"POST", "/config/apply", `{"document": "x"} {}`, 400, "invalid_request"},
		{"POST", "/config/apply", `{"document": "rules: [{name: x, action: login, key: [nothing], limit: 1, window: 1h}]"}`, 400, "invalid_config"},
		{"POST", "/config/rollback", `{"version": 7}`, 404, "not_found"},
		{"POST", "/config/rollback", `{"version": "1"}`, 400, "invalid_request"},
		{"POST", "/config/simulate", `{"document": "otp: {length: 4}"}`, 400, "invalid_config"},
	} {
		resp := c.request(t, tc.method, tc.path, tc.body, ok)
		if p := problemOf(t, resp); p.Status != tc.status || p.Code != tc.code {
			t.Errorf("%s %s %s: %d %s (%s), want %d %s", tc.method, tc.path, tc.body, p.Status, p.Code, p.Detail, tc.status, tc.code)
		}
	}
	resp := c.request(t, "POST", "/config/validate", `{"document": "rules: [{name: x, action: login, key: [nothing], limit: 1, window: 1h}]"}`, ok)
	var v struct {
		OK       bool
		Problems []string
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.OK || len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "rules[0] (x).key[0]") {
		t.Fatalf("validate an invalid document: %+v %v", v, err)
	}
}

// A document over a bound is refused by the console's config routes
// with a 413 naming the bound: over the body's bound before it is read
// whole, over config.MaxConfigBytes or config.MaxRules before it is parsed
// as a config (the backend is never asked).
func TestTheConsoleBoundsDocuments(t *testing.T) {
	c := newTestConsole(t)
	ok := map[string]string{"Content-Type": "application/json", "Origin": c.origin, "Cookie": "ok"}
	docs := []struct {
		name, doc, bound string
	}{
		{"2 MB", strings.Repeat("#\n", 1<<20), "the body is over 525312 bytes: a config document is at most 262144 bytes (config.MaxConfigBytes)"},
		{"300 KB", strings.Repeat("#", 300<<10), "the document is 307200 bytes; at most 262144 (config.MaxConfigBytes)"},
		{"20,000 rules", "rules:\n" + strings.Repeat("  - {x: 1}\n", 20000), "config.MaxRules"},
	}
	for _, path := range []string{"/config/validate", "/config/apply", "/config/simulate"} {
		for _, d := range docs {
			resp := c.request(t, "POST", path, `{"document":`+jsonString(d.doc)+`}`, ok)
			if p := problemOf(t, resp); p.Status != 413 || p.Code != "payload_too_large" || !strings.Contains(p.Detail, d.bound) {
				t.Errorf("%s to %s: %d %s %q", d.name, path, p.Status, p.Code, p.Detail)
			}
		}
	}
	if got := c.backend.recorded(); len(got) != 0 {
		t.Fatalf("documents over a bound were applied: %v", got)
	}
}

// The server's console routes bound the document (413 naming the bound),
// take JSON, and answer problems.
func TestTheServersConsoleRoutes(t *testing.T) {
	dir := t.TempDir()
	var applied []string
	file := NewConfigFile(dir+"/guard.yaml", testDoc, func(c config.Config) error { applied = append(applied, c.Rules[0].Name); return nil })
	srv := httptest.NewServer(Routes(Tokens{Admin: "admin", Viewer: "viewer"}, file, NewStats(), func() []guard.Rule { return nil }))
	defer srv.Close()
	put := func(token, ctype, body string) problem {
		req, _ := http.NewRequest("PUT", srv.URL+"/v1/console/config", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == 200 {
			return problem{Status: 200}
		}
		return problemOf(t, resp)
	}
	for _, tc := range []struct {
		name, token, ctype, body string
		status                   int
		code                     string
	}{
		{"no token", "", "application/json", `{"document":"rules: []"}`, 401, "unauthorized"},
		{"a viewer", "viewer", "application/json", `{"document":"rules: []"}`, 403, "forbidden"},
		{"YAML as the body", "admin", "application/yaml", "rules: []\n", 415, "unsupported_media_type"},
		{"2 MB", "admin", "application/json", `{"document":` + jsonString(strings.Repeat("#\n", 1<<20)) + `}`, 413, "payload_too_large"},
		{"20,000 rules", "admin", "application/json", `{"document":` + jsonString("rules:\n"+strings.Repeat("  - {x: 1}\n", 20000)) + `}`, 413, "payload_too_large"},
		{"invalid", "admin", "application/json", `{"document":"otp: {length: 4}"}`, 400, "invalid_config"},
		{"valid", "admin", "application/json", `{"document":"rules:\n  - {name: b, action: login, key: [ip], limit: 5, window: 1m}\n"}`, 200, ""},
	} {
		if p := put(tc.token, tc.ctype, tc.body); p.Status != tc.status || p.Code != tc.code {
			t.Errorf("%s: %d %s %q", tc.name, p.Status, p.Code, p.Detail)
		}
	}
	if !slices.Equal(applied, []string{"b"}) {
		t.Fatalf("applied: %v", applied)
	}
	resp, err := http.Get(srv.URL + "/v1/console/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if p := problemOf(t, resp); p.Code != "unauthorized" {
		t.Fatalf("GET without a token: %+v", p)
	}
}
