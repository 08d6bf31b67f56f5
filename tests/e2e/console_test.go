package e2e

import (
	"bufio"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the console's screenshots to docs/ (docs/console.md shows them)")

const consoleConfig = behindProxy + `rules:
  - {name: login-per-account, action: login, key: [account], limit: 3, window: 1h, count: failures,
     lockout: {initial: 1m, factor: 2, max: 15m}}
  - {name: login-per-ip, action: login, key: [ip], limit: 100, window: 1h}
  - {name: otp-per-destination, action: otp.send, key: [destination], limit: 3, window: 1h}
`

// runningConsole is a started `otpguard console`: its URL, and the
// per-start token of the URL it printed (login: that URL).
type runningConsole struct{ url, token string }

func (c runningConsole) login() string { return c.url + "/?token=" + c.token }

// startConsole runs `otpguard console` against s with token.
func startConsole(t *testing.T, s *server, token string) runningConsole {
	t.Helper()
	cmd := exec.Command(binary, "console", "-server", s.url, "-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "OTPGUARD_TOKEN="+token)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if after, ok := strings.CutPrefix(sc.Text(), "otpguard console on "); ok {
				urls <- strings.Fields(after)[0]
			}
		}
	}()
	select {
	case u := <-urls:
		base, token, _ := strings.Cut(u, "/?token=")
		return runningConsole{strings.TrimSuffix(base, "/"), token}
	case <-time.After(60 * time.Second): // a busy machine starts a process slowly
		t.Fatal("the console did not start")
	}
	return runningConsole{}
}

// browser is a headless Chromium (Debian's package, which make test
// installs) that accepts every confirmation dialog.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (make test installs Debian's chromium): ", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return ctx
}

// do runs steps, failing the test on an error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// text is the text of the element sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// eval is the value of a JavaScript expression.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// shot saves a screenshot of the page: to docs/ with -update-screenshots.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if *updateScreenshots {
		dir = filepath.Join("..", "..", "docs")
	}
	if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTheConsoleInABrowser drives `otpguard console` in headless Chromium
// against the built server on real Redis: each page loads; a locked
// account is looked up and unblocked (its owner then logs in); an invalid
// rule typed in the editor is named; a valid change applied is used by
// the server at once; the change is rolled back; a viewer's console
// greys out every change.
func TestTheConsoleInABrowser(t *testing.T) {
	s := start(t, backends()[0].redisURL, consoleConfig, "AUTH=local", "ADMIN_TOKEN=admin-token-for-the-test", "VIEWER_TOKEN=viewer-token-for-the-test")
	s.register(t, "ann@example.com", goodPassword, "198.51.100.1")
	for range 3 {
		s.login(t, "ann@example.com", "wrong password entirely", "203.0.113.5")
	}
	if r := s.login(t, "ann@example.com", goodPassword, "203.0.113.6"); r.status != 429 {
		t.Fatalf("the account is not locked: %d %s", r.status, r.raw)
	}
	con := startConsole(t, s, "admin-token-for-the-test")
	ctx := browser(t)

	// The URL the console printed: its token becomes the session cookie,
	// and the browser lands on the Rules page without it.
	do(t, ctx, chromedp.Navigate(con.login()), chromedp.WaitVisible("#rules"))
	if u := eval[string](t, ctx, `window.location.href`); u != con.url+"/" {
		t.Errorf("after the login the page is %s, want %s/", u, con.url)
	}

	// Rules: every rule with its decisions and a chart
	rules := text(t, ctx, "#rules")
	for _, r := range []string{"login-per-account", "login-per-ip", "otp-per-destination"} {
		if !strings.Contains(rules, r) {
			t.Errorf("the Rules page lacks %s: %s", r, rules)
		}
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#rules svg').length`); n != 3 {
		t.Errorf("%d charts on the Rules page, want 3", n)
	}
	if denied := text(t, ctx, `tr[data-rule="login-per-account"] td.denied`); !strings.HasPrefix(denied, "1 /") {
		t.Errorf("login-per-account's denials (the 4th attempt): %q", denied)
	}
	// the locked account is near the limit, by the fingerprint the
	// decision log shows (never its address)
	fp := regexp.MustCompile(`"deniedBy":"login-per-account","subject":"([^"]+)"`).FindStringSubmatch(s.logs.String())
	if near := text(t, ctx, `tr[data-rule="login-per-account"] td.near`); fp == nil || !strings.Contains(near, fp[1]+" denied") || strings.Contains(rules, "ann@") {
		t.Errorf("near the limit: %q (the log's fingerprint %v)", near, fp)
	}
	shot(t, ctx, "rules")

	// Subject: the locked account, unblocked with a confirmation
	do(t, ctx, chromedp.Navigate(con.url+"/subject"), chromedp.WaitVisible("#lookup"),
		chromedp.SetValue("#dimension", "account"), chromedp.SendKeys("#value", "Ann@Example.com"), chromedp.Click("#look"),
		chromedp.WaitVisible("#state"))
	if summary := text(t, ctx, "#summary"); !strings.HasPrefix(summary, "locked") {
		t.Fatalf("the Subject page: %q", summary)
	}
	shot(t, ctx, "subject")
	do(t, ctx, chromedp.Click("#unblock"))
	waitFlash(t, ctx, "unblocked")
	if flash, summary := text(t, ctx, "#flash"), text(t, ctx, "#summary"); flash != "unblocked" || !strings.HasPrefix(summary, "not locked") {
		t.Fatalf("after the unblock: %q %q", flash, summary)
	}
	if r := s.login(t, "ann@example.com", goodPassword, "203.0.113.7"); r.status != 200 {
		t.Fatalf("the owner after the unblock: %d %s", r.status, r.raw)
	}

	// Config: an invalid rule is named as you type
	setDoc := func(doc string) {
		t.Helper()
		eval[bool](t, ctx, `(function(d){var t=document.getElementById('doc');t.value=d;t.dispatchEvent(new Event('input'));return true;})(`+jsString(doc)+`)`)
	}
	do(t, ctx, chromedp.Navigate(con.url+"/config"), chromedp.WaitVisible("#doc"))
	setDoc(consoleConfig + "  - {name: bad-one, action: login, key: [nothing], limit: 1, window: 1h}\n")
	do(t, ctx, chromedp.WaitVisible("#errors li"))
	if errs := text(t, ctx, "#errors"); !strings.Contains(errs, "rules[3] (bad-one).key[0]") {
		t.Fatalf("the editor's errors: %q", errs)
	}
	shot(t, ctx, "config")

	// a valid change: its diff, "simulate this", applied: the server uses
	// it at once
	changed := consoleConfig + "  - {name: signup-per-ip-console, action: signup, key: [ip], limit: 7, window: 1h}\n"
	setDoc(changed)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('diff').textContent.indexOf('signup-per-ip-console') >= 0 && document.getElementById('errors').children.length == 0`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the diff of a valid change: %v (%q)", err, text(t, ctx, "#diff"))
	}
	if diff := text(t, ctx, "#diff"); !strings.Contains(diff, "+   - {name: signup-per-ip-console") {
		t.Errorf("the diff: %q", diff)
	}
	do(t, ctx, chromedp.Click("#simulate"))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('sim').textContent.indexOf('sms pumping') >= 0`,
		chromedp.WithPollingTimeout(2*time.Minute))); err != nil {
		t.Fatalf("simulate this: %v (%q)", err, text(t, ctx, "#sim"))
	}
	if sim := text(t, ctx, "#sim"); !strings.Contains(sim, "running") || !strings.Contains(sim, "edited") {
		t.Errorf("the simulation's table: %q", sim)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#simcharts svg').length`); n != 2 {
		t.Errorf("%d simulation charts, want 2", n)
	}
	shot(t, ctx, "simulate")
	do(t, ctx, chromedp.Click("#apply"))
	waitFlash(t, ctx, "applied")
	if flash := text(t, ctx, "#flash"); !strings.HasPrefix(flash, "applied") {
		t.Fatalf("apply: %q", flash)
	}
	auth := []string{"Authorization", "Bearer admin-token-for-the-test"}
	uses := func(rule string) bool {
		r := s.post(t, "/v1/decisions", map[string]any{"action": "signup", "subject": map[string]string{"ip": "192.0.2.9"}}, auth...)
		return strings.Contains(r.raw, rule)
	}
	if !uses("signup-per-ip-console") {
		t.Fatal("the server does not use the applied rule")
	}
	shot(t, ctx, "history")

	// roll back to the first version: the rule is gone again
	// (the page after apply has a #flash already: wait for the new page's)
	do(t, ctx, chromedp.Click(`button.rollback[data-version="1"]`))
	waitFlash(t, ctx, "rolled back")
	if flash := text(t, ctx, "#flash"); !strings.HasPrefix(flash, "rolled back to version 1") || uses("signup-per-ip-console") {
		t.Fatalf("rollback: %q; the server still uses the rule: %v", flash, uses("signup-per-ip-console"))
	}

	// a viewer's console: it reads, and every change is greyed out
	view := startConsole(t, s, "viewer-token-for-the-test")
	do(t, ctx, chromedp.Navigate(view.login()), chromedp.WaitVisible("#rules"),
		chromedp.Navigate(view.url+"/subject?dimension=account&value=ann@example.com"), chromedp.WaitVisible("#state"))
	access := text(t, ctx, "#access")
	disabled := eval[bool](t, ctx, `document.getElementById('unblock').disabled && document.getElementById('revoke').disabled`)
	if !strings.Contains(access, "read only") || !disabled {
		t.Errorf("a viewer's console: %q, buttons disabled %v", access, disabled)
	}
	if r := s.do(t, "PUT", "/v1/console/config", changed, "Authorization", "Bearer viewer-token-for-the-test"); r.status != 403 {
		t.Errorf("a viewer's PUT of the config: %d %s", r.status, r.raw)
	}
	if r := s.do(t, "DELETE", "/v1/blocks/account/ann@example.com", "", "Authorization", "Bearer viewer-token-for-the-test"); r.status/100 != 4 {
		t.Errorf("a viewer's unblock: %d %s", r.status, r.raw)
	}
}

// waitFlash waits for the page's flash message to start with prefix (a
// new page: the one before may have had a flash of its own).
func waitFlash(t *testing.T, ctx context.Context, prefix string) {
	t.Helper()
	expr := `(function(){var f=document.getElementById('flash');return !!f && f.textContent.indexOf(` + jsString(prefix) + `)===0;})()`
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var ok bool
		// an error while the page navigates: try again
		if ok, err = chromedp.Run(ctx, chromedp.Evaluate[bool](expr)); err == nil && ok {
			return
		}
	}
	t.Fatalf("no flash %q: %v", prefix, err)
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "<", `\u003c`)
	return `"` + r.Replace(s) + `"`
}
