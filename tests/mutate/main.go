// Command mutate is otpguard's mutation testing (make mutate): it changes
// the product's code one small, realistic bug at a time and runs the tests
// that should catch it, then prints the kill rate per package and lists
// the mutants that survived.
//
//   - Go packages: github.com/go-gremlins/gremlins (pinned by this
//     module's go.mod, so the product module does not carry it), one
//     package at a time, each mutant against that package's tests.
//   - The Lua library (guard/redisstore/otpguard.lua): a mutator of our
//     own (lua.go) flips comparison and arithmetic operators, drops a
//     PX, NX or PEXPIRE, and moves a number by one; each mutant runs the
//     store tests in a copy of the module: memstore's (the differential
//     on the embedded Redis and the oracle, seconds), then, if those
//     passed, redisstore's (real redis-server, a cluster, the Serverless
//     double, the oracle walks).
//
// A mutant is killed when a test fails (or hangs past the timeout),
// survives when every test passes. Mutants known to be equivalent (the
// program cannot tell them from the original) are listed with the reason
// in equivalent.txt and left out of the rate: the rate is killed / (killed
// + survived) over the others. Not part of make test: a full run takes
// hours on two cores.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The packages the issue holds to a kill rate, and others worth a look.
var defaultPackages = "guard/token,guard/esdk,guard/captcha,guard/memstore,guard/redisstore"

// The packages tested mostly outside them, for our own mutator (gomut.go):
// each with the test packages that exercise it.
var defaultOwn = "guard=./guard|./guard/memstore,./guard/api,./internal/app,./internal/triggers|./guard/redisstore;guard/api=./guard/api,./internal/triggers|./internal/app"

func main() {
	root := flag.String("root", "../..", "the product module's root")
	pkgs := flag.String("pkgs", defaultPackages, "comma-separated Go packages (relative to root) for gremlins; empty for none")
	own := flag.String("own", defaultOwn, "packages for our own Go mutator, each with its tests in stages (a stage runs while the mutant survives): pkg=./quick,./other|./slow;pkg2=...; empty for none")
	lua := flag.Bool("lua", true, "mutate guard/redisstore/otpguard.lua too")
	workers := flag.Int("workers", 1, "gremlins workers (each a copy of the module running tests)")
	goSample := flag.Int("sample", 0, "run at most this many covered mutants of each -own package (0: all), spread over it: the rate is then an estimate")
	shift := flag.Int("sample-shift", 0, "with -sample: take each sampled mutant this many places further on (another sample of the same spread)")
	dry := flag.Bool("dry", false, "our own Go mutator: measure coverage and list the mutants no test runs, run none")
	luaLimit := flag.Int("lua-limit", 0, "mutate at most this many Lua mutants (0: all), spread over the file")
	out := flag.String("out", "", "a folder for the raw results (default: a temporary one)")
	flag.Parse()

	abs, err := filepath.Abs(*root)
	check(err)
	*root = abs
	if *out == "" {
		*out, err = os.MkdirTemp("", "mutate-")
		check(err)
	}
	check(os.MkdirAll(*out, 0o755))
	equiv, err := readEquivalents("equivalent.txt")
	check(err)

	var results []result
	if *pkgs != "" {
		bin := filepath.Join(*out, "gremlins")
		build := exec.Command("go", "build", "-o", bin, "github.com/go-gremlins/gremlins/cmd/gremlins")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		check(build.Run())
		// gremlins copies the module it runs in for each worker: a copy of
		// what git tracks, not the work tree's node_modules and builds
		// (nor an edit made while it runs)
		clean, err := copyModule(*root)
		check(err)
		defer os.RemoveAll(clean)
		for _, p := range strings.Split(*pkgs, ",") {
			if p = strings.TrimSpace(p); p != "" {
				results = append(results, gremlins(bin, clean, p, *workers, *out, equiv))
			}
		}
	}
	if *own != "" {
		clean, err := copyModule(*root)
		check(err)
		defer os.RemoveAll(clean)
		for _, spec := range strings.Split(*own, ";") {
			pkg, tests, ok := strings.Cut(strings.TrimSpace(spec), "=")
			if !ok || pkg == "" || tests == "" {
				check(fmt.Errorf("-own: %q is not pkg=./tests,./more|./slower", spec))
			}
			var stages [][]string
			for _, stage := range strings.Split(tests, "|") {
				stages = append(stages, strings.Split(stage, ","))
			}
			results = append(results, goRun(clean, pkg, stages, *workers, *goSample, *shift, *dry, *out, equiv))
		}
	}
	if *lua {
		results = append(results, luaRun(*root, *luaLimit, equiv))
	}

	fmt.Println()
	fmt.Println("package                     mutants  killed  survived  equivalent  not covered  not viable  kill rate")
	for _, r := range results {
		rate := "-"
		scale := max(r.scale, 1)
		killed, lived := scale*float64(r.killed), scale*float64(len(r.survivors)-r.uncovered)+float64(r.uncovered)
		if killed+lived > 0 {
			rate = fmt.Sprintf("%.1f%%", 100*killed/(killed+lived))
			if r.scale > 1 {
				rate = "~" + rate // estimated from a sample
			}
		}
		fmt.Printf("%-27s %7d %7d %9d %11d %12d %11d %10s\n", r.name, r.total, r.killed, len(r.survivors), len(r.equivalent), r.notCovered, r.notViable, rate)
	}
	for _, r := range results {
		if len(r.survivors) == 0 {
			continue
		}
		fmt.Printf("\nsurvivors in %s:\n", r.name)
		for _, s := range r.survivors {
			fmt.Println("  " + s)
		}
	}
	fmt.Printf("\n(raw results in %s)\n", *out)
}

type result struct {
	name                  string
	total, killed         int
	notCovered, notViable int
	sampled               int     // covered mutants left out of a sample
	scale                 float64 // covered / sampled: what each mutant run stands for
	uncovered             int     // survivors that no test runs (never sampled)
	survivors, equivalent []string
}

// gremlins runs gremlins on one package and reads its JSON report.
func gremlins(bin, root, pkg string, workers int, out string, equiv map[string]string) result {
	report := filepath.Join(out, strings.ReplaceAll(pkg, "/", "_")+".json")
	began := time.Now()
	fmt.Fprintf(os.Stderr, "== gremlins %s\n", pkg)
	cmd := exec.Command(bin, "unleash", "--workers", fmt.Sprint(workers), "--timeout-coefficient", "5",
		"--invert-logical", "--output", report, "./"+pkg)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "gremlins %s: %v\n", pkg, err)
	}
	var rep struct {
		Files []struct {
			Name      string `json:"file_name"`
			Mutations []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
				Line   int    `json:"line"`
				Column int    `json:"column"`
			} `json:"mutations"`
		} `json:"files"`
	}
	r := result{name: pkg}
	b, err := os.ReadFile(report)
	if err != nil {
		r.survivors = append(r.survivors, "no report: "+err.Error())
		return r
	}
	check(json.Unmarshal(b, &rep))
	for _, f := range rep.Files {
		path := f.Name
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, pkg, filepath.Base(f.Name))
		}
		lines := readLines(path)
		for _, m := range f.Mutations {
			r.total++
			text := ""
			if m.Line-1 < len(lines) {
				text = strings.TrimSpace(lines[m.Line-1])
			}
			where := fmt.Sprintf("%s:%d:%d %s  %s", filepath.Join(pkg, filepath.Base(f.Name)), m.Line, m.Column, m.Type, text)
			key := goKey(pkg, f.Name, m.Type, text)
			switch m.Status {
			case "KILLED", "TIMED OUT":
				r.killed++
			case "LIVED":
				if why, ok := equiv[key]; ok {
					r.equivalent = append(r.equivalent, where+"  ("+why+")")
				} else {
					r.survivors = append(r.survivors, where+"\n      equivalent.txt key: "+key)
				}
			case "NOT COVERED":
				r.notCovered++
				if _, ok := equiv[key]; !ok {
					// a mutant no test runs is a survivor too
					r.survivors = append(r.survivors, where+"  [not covered]\n      equivalent.txt key: "+key)
				}
			case "NOT VIABLE":
				r.notViable++
			}
		}
	}
	sort.Strings(r.survivors)
	fmt.Fprintf(os.Stderr, "== gremlins %s: %d mutants in %s\n", pkg, r.total, time.Since(began).Round(time.Second))
	return r
}

// goKey names a Go mutant in equivalent.txt: its file, type and line.
func goKey(pkg, file, typ, text string) string {
	return filepath.Join(pkg, filepath.Base(file)) + " | " + typ + " | " + text
}

// readEquivalents reads "key → reason" lines: the key as goKey or luaKey
// make it, then " # " and why the mutant is equivalent.
func readEquivalents(path string) (map[string]string, error) {
	m := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return m, nil
		}
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "//") {
			continue
		}
		key, why, ok := strings.Cut(line, " # ")
		if !ok {
			return nil, fmt.Errorf("%s: no reason in %q", path, line)
		}
		m[strings.TrimSpace(key)] = strings.TrimSpace(why)
	}
	return m, sc.Err()
}

func readLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(string(b), "\n")
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}
