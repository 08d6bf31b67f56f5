// Package repo checks the repository as a newcomer finds it: it stands on
// its own (no file outside it referred to, no tracker's issue numbers), it
// carries no build output or large file, and its front page stays short.
package repo

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// tracked lists the files git tracks (the repository as a clone has it).
func tracked(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		files = append(files, f)
	}
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d files", len(files))
	}
	return files
}

// No tracked file is over 1 MB, and none is a program built here.
func TestNoLargeFileOrBuildOutput(t *testing.T) {
	for _, f := range tracked(t) {
		st, err := os.Stat("../../" + f)
		if err != nil {
			continue // deleted in the working tree
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s is %d bytes: a repository keeps no file over 1 MB", f, st.Size())
		}
		b := make([]byte, 4)
		if fh, err := os.Open("../../" + f); err == nil {
			n, _ := fh.Read(b)
			fh.Close()
			if n == 4 && string(b) == "\x7fELF" {
				t.Errorf("%s is a compiled program: build outputs are not committed", f)
			}
		}
	}
}

// No Go file of the product (outside tests/ and third_party/, tests
// aside) is over 400 lines: a file is one idea a reader can hold.
func TestNoProductFileOver400Lines(t *testing.T) {
	checked := 0
	for _, f := range tracked(t) {
		if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, "tests/") || strings.HasPrefix(f, "third_party/") {
			continue
		}
		b, err := os.ReadFile("../../" + f)
		if err != nil {
			continue // deleted in the working tree
		}
		checked++
		if n := strings.Count(string(b), "\n"); n > 400 {
			t.Errorf("%s has %d lines: split it by what its parts do (at most 400)", f, n)
		}
	}
	if checked < 100 {
		t.Fatalf("%d Go files checked", checked)
	}
}

// The repository refers to nothing outside it: no path above its root, no
// issue number of a tracker a reader cannot see.
func TestItStandsOnItsOwn(t *testing.T) {
	outside := regexp.MustCompile(`\.\./shared|\bSPEC\.md\b|\b[Ii]ssues? #?\d+\b|\bSPEC section\b`)
	for _, f := range tracked(t) {
		if strings.HasPrefix(f, "third_party/") || strings.HasSuffix(f, ".png") || strings.HasSuffix(f, ".svg") ||
			strings.HasSuffix(f, "package-lock.json") || f == "tests/repo/repo_test.go" {
			continue
		}
		b, err := os.ReadFile("../../" + f)
		if err != nil {
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d refers to %q: %s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// The README is the front page: at most 300 lines, and every page it
// links to exists.
func TestTheREADMEIsAFrontPage(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, at most 300: the rest goes to docs/", n)
	}
	for _, m := range regexp.MustCompile(`\]\(((?:docs/)?[\w./-]+\.md)\)`).FindAllStringSubmatch(string(b), -1) {
		if _, err := os.Stat("../../" + m[1]); err != nil {
			t.Errorf("the README links to %s, which does not exist", m[1])
		}
	}
}

// docs/config.md shows the default rules as config/default.yaml has them.
func TestTheDocumentedDefaultRulesAreTheDefaults(t *testing.T) {
	def, err := os.ReadFile("../../config/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rules, ok := strings.Cut(string(def), "\nrules:\n")
	if !ok {
		t.Fatal("config/default.yaml has no rules list")
	}
	if !strings.Contains(string(doc), "```yaml\nrules:\n"+rules) {
		t.Error("docs/config.md does not show config/default.yaml's rules as they are: copy them in")
	}
}

// The product's programs (the local server, the simulator, every Lambda
// function) link no test double, and the package graph runs downward: an
// adapter does not import the HTTP API it plugs into, the triggers do not
// import the function runtime they are handed to, the authenticator's
// environment does not import the composition root.
func TestTheGraphRunsDownward(t *testing.T) {
	deps := func(pkg string) []string {
		t.Helper()
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg)
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const mod = "github.com/otpguard/otpguard/"
	programs := deps("./cmd/...")
	programs = append(programs, deps("./functions/...")...)
	if len(programs) < 50 {
		t.Fatalf("go list found %d packages", len(programs))
	}
	for _, p := range programs {
		if strings.HasPrefix(p, mod+"internal/testonly") {
			t.Errorf("a program links the test double %s", p)
		}
	}
	for pkg, not := range map[string]string{
		"./guard/captcha":     mod + "guard/api",
		"./internal/triggers": mod + "internal/lambdaapp",
		"./internal/authenv":  mod + "internal/app",
	} {
		for _, p := range deps(pkg) {
			if p == not {
				t.Errorf("%s imports %s", pkg, not)
			}
		}
	}
}
