package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestTheREADMESessionRunsAsWritten runs the README's session (the ```sh
// block after its "session" mark) against the built server: the `make
// run` line starts the server with the environment it names (the outbox
// in the test's own directory, the address the test's), every other `$ `
// line runs in one bash, in order, with the server's address for
// localhost:8080, and each command's output must read as the README
// shows it, where … stands for anything (a token, a session, the rest of
// a list).
func TestTheREADMESessionRunsAsWritten(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), "<!-- session:")
	if !ok {
		t.Fatal("the README has no session mark")
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if ok {
		block, _, ok = strings.Cut(block, "\n```")
	}
	if !ok {
		t.Fatal("the README's session has no ```sh block")
	}
	type step struct{ cmd, want string }
	var steps []step
	for line := range strings.Lines(block) {
		line = strings.TrimRight(line, "\n")
		if cmd, isCmd := strings.CutPrefix(line, "$ "); isCmd {
			steps = append(steps, step{cmd: cmd})
		} else if len(steps) > 0 {
			steps[len(steps)-1].want += line + "\n"
		}
	}
	if len(steps) < 5 || !strings.Contains(steps[0].cmd, "make run") {
		t.Fatalf("the session does not start with make run: %q", steps)
	}
	extra := []string{"DELIVERY_MODE=queue"} // make run's default: the harness's is direct
	for _, f := range strings.Fields(steps[0].cmd) {
		if name, _, ok := strings.Cut(f, "="); ok && name != "OUTBOX_PATH" {
			extra = append(extra, f)
		}
	}
	// (the store timeout of a loaded machine: the session is not about
	// timeouts, and make test runs beside other suites)
	s := start(t, "", "store: {timeout: 10s}\n", extra...)
	var script bytes.Buffer
	const mark = "@@readme-step-done@@"
	for _, st := range steps[1:] {
		cmd := strings.ReplaceAll(st.cmd, "localhost:8080", strings.TrimPrefix(s.url, "http://"))
		cmd = strings.ReplaceAll(cmd, "/tmp/outbox.jsonl", s.outbox)
		script.WriteString(cmd + "\necho\necho " + mark + "\n")
	}
	bash := exec.Command("bash", "-e")
	bash.Stdin = &script
	out, err := bash.CombinedOutput()
	if err != nil {
		t.Fatalf("the session failed: %v\n%s", err, out)
	}
	got := strings.Split(string(out), mark+"\n")
	if len(got) != len(steps) {
		t.Fatalf("%d outputs for %d commands:\n%s", len(got)-1, len(steps)-1, out)
	}
	for i, st := range steps[1:] {
		want, have := strings.TrimSpace(st.want), strings.TrimSpace(got[i])
		pattern := "^" + strings.ReplaceAll(regexp.QuoteMeta(want), "…", ".*") + "$"
		if !regexp.MustCompile(pattern).MatchString(have) {
			t.Errorf("$ %s\n  the README shows: %s\n  the server said: %s", st.cmd, want, have)
		}
	}
}
