package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A mutator of our own for Go packages whose behaviour is tested mostly
// outside them (guard/api is tested through internal/app's server and its
// handlers' clients): gremlins runs only a package's own tests on each of
// its mutants and calls the rest "not covered". This one makes the same
// kinds of mutant as gremlins (its type names, so equivalent.txt keys are
// alike), applies each through go test -overlay (the module is not
// touched) and runs the test packages given for the package.

// goMutant is one change of one operator in one file.
type goMutant struct {
	file     string // absolute
	off, end int    // the bytes replaced
	line     int
	col      int
	typ      string // gremlins' names: ARITHMETIC_BASE, CONDITIONALS_BOUNDARY, ...
	to       string
	// anchor is where coverage is read for it: its own place, or for a
	// case expression its switch, for an else-if's condition the first
	// if (the profile's blocks leave those expressions out)
	aline, acol int
	// static: outside every function (a constant's value), so run by
	// whatever test builds the package (no profile block holds it)
	static bool
}

var (
	arithmetic = map[token.Token]string{token.ADD: "-", token.SUB: "+", token.MUL: "/", token.QUO: "*", token.REM: "*"}
	boundary   = map[token.Token]string{token.LSS: "<=", token.LEQ: "<", token.GTR: ">=", token.GEQ: ">"}
	negation   = map[token.Token]string{token.EQL: "!=", token.NEQ: "==", token.LSS: ">=", token.LEQ: ">", token.GTR: "<=", token.GEQ: "<"}
	logical    = map[token.Token]string{token.LAND: "||", token.LOR: "&&"}
)

// goMutants lists the mutants of one Go file.
func goMutants(path string) ([]goMutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	// the spans of expressions no profile block holds, each with the
	// statement whose reaching them stands for
	type region struct{ from, to, anchor token.Pos }
	var regions []region
	ast.Inspect(f, func(n ast.Node) bool {
		var body *ast.BlockStmt
		switch st := n.(type) {
		case *ast.SwitchStmt:
			body = st.Body
		case *ast.TypeSwitchStmt:
			body = st.Body
		case *ast.IfStmt:
			for top, e := st, st.Else; e != nil; {
				next, ok := e.(*ast.IfStmt)
				if !ok {
					break
				}
				regions = append(regions, region{next.If, next.Body.Lbrace, top.If})
				e = next.Else
			}
		}
		if body != nil {
			for _, c := range body.List {
				if cc, ok := c.(*ast.CaseClause); ok {
					regions = append(regions, region{cc.Case, cc.Colon, n.Pos()})
				}
			}
		}
		return true
	})
	var funcs [][2]token.Pos
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			funcs = append(funcs, [2]token.Pos{fd.Pos(), fd.End()})
		}
	}
	var out []goMutant
	add := func(pos token.Pos, n int, typ, to string) {
		p := fset.Position(pos)
		anchor := pos
		for _, r := range regions {
			// the innermost region holding pos (regions nest inward as
			// they are found)
			if pos >= r.from && pos < r.to {
				anchor = r.anchor
			}
		}
		a := fset.Position(anchor)
		static := true
		for _, fn := range funcs {
			if pos >= fn[0] && pos < fn[1] {
				static = false
			}
		}
		out = append(out, goMutant{file: path, off: p.Offset, end: p.Offset + n, line: p.Line, col: p.Column, typ: typ, to: to, aline: a.Line, acol: a.Column, static: static})
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch e := n.(type) {
		case *ast.BinaryExpr:
			w := len(e.Op.String())
			if to, ok := arithmetic[e.Op]; ok {
				add(e.OpPos, w, "ARITHMETIC_BASE", to)
			}
			if to, ok := boundary[e.Op]; ok {
				add(e.OpPos, w, "CONDITIONALS_BOUNDARY", to)
			}
			if to, ok := negation[e.Op]; ok {
				add(e.OpPos, w, "CONDITIONALS_NEGATION", to)
			}
			if to, ok := logical[e.Op]; ok {
				add(e.OpPos, w, "INVERT_LOGICAL", to)
			}
		case *ast.IncDecStmt:
			to := "--"
			if e.Tok == token.DEC {
				to = "++"
			}
			add(e.TokPos, 2, "INCREMENT_DECREMENT", to)
		case *ast.UnaryExpr:
			if e.Op == token.SUB {
				add(e.OpPos, 1, "INVERT_NEGATIVES", "")
			}
		}
		return true
	})
	return out, nil
}

// coverage is, per file (base name), each block the tests' profile
// names and whether any test ran it.
type coverage map[string]map[coverBlock]bool

// goCoverage runs the test packages once with coverage of pkg.
func goCoverage(root, importPath string, tests []string, dir string) (coverage, error) {
	profile := filepath.Join(dir, "cover.out")
	args := append([]string{"test", "-count=1", "-coverpkg=" + importPath, "-coverprofile=" + profile}, tests...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("coverage: %v\n%s", err, out)
	}
	f, err := os.Open(profile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readCoverage(f)
}

// readCoverage reads a profile: name.go:l0.c0,l1.c1 statements count, a
// block once per test binary (covered when any ran it).
func readCoverage(r io.Reader) (coverage, error) {
	cov := coverage{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") {
			continue
		}
		name, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 3 {
			continue
		}
		var b coverBlock
		if _, err := fmt.Sscanf(fields[0], "%d.%d,%d.%d", &b.l0, &b.c0, &b.l1, &b.c1); err != nil {
			continue
		}
		base := filepath.Base(name)
		if cov[base] == nil {
			cov[base] = map[coverBlock]bool{}
		}
		cov[base][b] = cov[base][b] || fields[2] != "0"
	}
	return cov, sc.Err()
}

// covered reports whether the tests ran the code at line:col of file. The
// profile's blocks leave out what a statement's header holds after its
// block ends (a switch's case expressions, an if's else-if conditions):
// such code ran when the block just before it did.
func (c coverage) covered(file string, line, col int) bool {
	var before coverBlock
	found := false
	for b, ran := range c[file] {
		if b.holds(line, col) {
			return ran
		}
		if (b.l1 < line || b.l1 == line && b.c1 <= col) && (!found || b.l1 > before.l1 || b.l1 == before.l1 && b.c1 > before.c1) {
			before, found = b, true
		}
	}
	return found && c[file][before]
}

// coverBlock is a span of a file.
type coverBlock struct{ l0, c0, l1, c1 int }

func (b coverBlock) holds(line, col int) bool {
	after := line > b.l0 || line == b.l0 && col >= b.c0
	before := line < b.l1 || line == b.l1 && col <= b.c1
	return after && before
}

// goRun mutates the package pkg (relative to root) and runs the tests of
// each stage (go package patterns, relative to root) on each covered
// mutant, the next stage only while the mutant survives: the package's
// own quick tests first, the slow ones (real Redis) for what they missed.
func goRun(root, pkg string, stages [][]string, workers, sample, shift int, dry bool, out string, equiv map[string]string) result {
	var tests, names []string
	for _, s := range stages {
		tests = append(tests, s...)
		names = append(names, strings.Join(s, " "))
	}
	r := result{name: pkg + " (tests: " + strings.Join(names, ", then ") + ")"}
	began := time.Now()
	modPath, err := exec.Command("go", "-C", root, "list", "-m").Output()
	check(err)
	importPath := strings.TrimSpace(string(modPath)) + "/" + pkg
	dir, err := os.MkdirTemp(out, strings.ReplaceAll(pkg, "/", "_")+"-")
	check(err)
	fmt.Fprintf(os.Stderr, "== %s: coverage from %s\n", pkg, strings.Join(tests, " "))
	cover, err := goCoverage(root, importPath, tests, dir)
	check(err)

	files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
	check(err)
	var all []goMutant
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ms, err := goMutants(f)
		check(err)
		all = append(all, ms...)
	}
	covered := all[:0:0]
	for _, m := range all {
		r.total++
		if m.static || cover.covered(filepath.Base(m.file), m.aline, m.acol) {
			covered = append(covered, m)
			continue
		}
		if !compiles(root, dir, pkg, m) {
			r.notViable++ // a string's + made -, say: no mutant at all
			continue
		}
		r.notCovered++
		where, key := goWhere(pkg, m)
		if _, ok := equiv[key]; !ok {
			r.survivors = append(r.survivors, where+"  [not covered]\n      equivalent.txt key: "+key)
			r.uncovered++
		}
	}
	if dry {
		fmt.Fprintf(os.Stderr, "== %s: %d mutants, %d covered (-dry: none run)\n", pkg, len(all), len(covered))
		return r
	}
	if sample > 0 && sample < len(covered) {
		// an even spread over the package, moved by shift mutants (another
		// sample of the same size): the rate is then an estimate
		var some []goMutant
		for i := range sample {
			some = append(some, covered[(i*len(covered)/sample+shift)%len(covered)])
		}
		r.name += fmt.Sprintf(" [a sample of %d of %d covered", sample, len(covered))
		if shift != 0 {
			r.name += fmt.Sprintf(", shifted by %d", shift)
		}
		r.name += "]"
		r.sampled = len(covered) - sample
		r.scale = float64(len(covered)) / float64(sample)
		covered = some
	}
	// the baseline, to size each mutant's timeout
	t0 := time.Now()
	if failed, _ := goTestOverlay(root, "", tests, 30*time.Minute); failed {
		check(fmt.Errorf("%s: the tests fail without a mutant", pkg))
	}
	timeout := 5*time.Since(t0) + 30*time.Second
	fmt.Fprintf(os.Stderr, "== %s: %d mutants, %d covered; each run stops after %s\n", pkg, len(all), len(covered), timeout.Round(time.Second))

	type outcome struct {
		m      goMutant
		status string
	}
	jobs := make(chan int)
	results := make([]outcome, len(covered))
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for w := range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				m := covered[i]
				status := runGoMutant(root, dir, w, m, stages, timeout)
				results[i] = outcome{m, status}
				mu.Lock()
				done++
				where, _ := goWhere(pkg, m)
				fmt.Fprintf(os.Stderr, "   %d/%d %s: %s (%s)\n", done, len(covered), where, status, time.Since(began).Round(time.Second))
				mu.Unlock()
			}
		}()
	}
	for i := range covered {
		jobs <- i
	}
	close(jobs)
	wg.Wait()

	var raw []map[string]any
	for _, o := range results {
		where, key := goWhere(pkg, o.m)
		raw = append(raw, map[string]any{"where": where, "status": o.status})
		switch o.status {
		case "killed", "timed out":
			r.killed++
		case "not viable":
			r.notViable++
		default:
			if why, ok := equiv[key]; ok {
				r.equivalent = append(r.equivalent, where+"  ("+why+")")
			} else {
				r.survivors = append(r.survivors, where+"\n      equivalent.txt key: "+key)
			}
		}
	}
	b, _ := json.MarshalIndent(raw, "", "  ")
	_ = os.WriteFile(filepath.Join(out, strings.ReplaceAll(pkg, "/", "_")+"-own.json"), b, 0o644)
	sort.Strings(r.survivors)
	fmt.Fprintf(os.Stderr, "== %s: %d mutants in %s\n", pkg, r.total, time.Since(began).Round(time.Second))
	return r
}

// goWhere names a mutant for people and for equivalent.txt (the same key
// as a gremlins mutant of that line).
func goWhere(pkg string, m goMutant) (where, key string) {
	lines := readLines(m.file)
	text := ""
	if m.line-1 < len(lines) {
		text = strings.TrimSpace(lines[m.line-1])
	}
	where = fmt.Sprintf("%s:%d:%d %s  %s", filepath.Join(pkg, filepath.Base(m.file)), m.line, m.col, m.typ, text)
	return where, goKey(pkg, m.file, m.typ, text)
}

// runGoMutant writes the mutated file beside an overlay naming it and
// runs the tests, stage after stage while it survives: killed, timed out,
// survived or not viable (it does not compile).
func runGoMutant(root, dir string, worker int, m goMutant, stages [][]string, timeout time.Duration) string {
	src, err := os.ReadFile(m.file)
	check(err)
	mutated := string(src[:m.off]) + m.to + string(src[m.end:])
	file := filepath.Join(dir, "w"+strconv.Itoa(worker)+"-"+filepath.Base(m.file))
	check(os.WriteFile(file, []byte(mutated), 0o644))
	overlay := filepath.Join(dir, "w"+strconv.Itoa(worker)+".json")
	b, _ := json.Marshal(map[string]any{"Replace": map[string]string{m.file: file}})
	check(os.WriteFile(overlay, b, 0o644))
	for _, tests := range stages {
		failed, output := goTestOverlay(root, overlay, tests, timeout)
		switch {
		case output == "timeout":
			return "timed out"
		case !failed:
			continue
		case strings.Contains(output, "[build failed]") || strings.Contains(output, "[setup failed]"):
			return "not viable"
		}
		return "killed"
	}
	return "survived"
}

// compiles reports whether the package builds with mutant m (a mutant
// no test runs is a survivor only if it is a program at all).
func compiles(root, dir, pkg string, m goMutant) bool {
	src, err := os.ReadFile(m.file)
	check(err)
	file := filepath.Join(dir, "build-"+filepath.Base(m.file))
	check(os.WriteFile(file, []byte(string(src[:m.off])+m.to+string(src[m.end:])), 0o644))
	overlay := filepath.Join(dir, "build.json")
	b, _ := json.Marshal(map[string]any{"Replace": map[string]string{m.file: file}})
	check(os.WriteFile(overlay, b, 0o644))
	cmd := exec.Command("go", "build", "-overlay", overlay, "-o", os.DevNull, "./"+pkg)
	cmd.Dir = root
	return cmd.Run() == nil
}

// goTestOverlay runs the tests once (with overlay, if given) and says
// whether they failed, with their output ("timeout" when they hung).
func goTestOverlay(root, overlay string, tests []string, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"test", "-count=1", "-failfast", "-timeout", timeout.String()}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, tests...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return true, "timeout"
	}
	return err != nil, string(out)
}
