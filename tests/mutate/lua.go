package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/yuin/gopher-lua/parse"
)

const luaFile = "guard/redisstore/otpguard.lua"

// luaMutant is one change to one line of the library.
type luaMutant struct {
	line     int // 1-based
	kind     string
	from, to string // the line before and after
}

// The operators, as the library writes them (spaces around binary
// operators), and what each becomes.
var flips = []struct{ from, to, kind string }{
	{" <= ", " < ", "comparison"}, {" < ", " <= ", "comparison"}, {" >= ", " > ", "comparison"}, {" > ", " >= ", "comparison"},
	{" == ", " ~= ", "comparison"}, {" ~= ", " == ", "comparison"},
	{" + ", " - ", "arithmetic"}, {" - ", " + ", "arithmetic"}, {" * ", " / ", "arithmetic"}, {" / ", " * ", "arithmetic"},
	{" and ", " or ", "logical"}, {" or ", " and ", "logical"},
}

var (
	pxArg   = regexp.MustCompile(`, 'PX', (ms\([^()]*(\([^()]*\))?[^()]*\)|[A-Za-z0-9_.\[\]]+)`)
	nxArg   = regexp.MustCompile(`, 'NX'`)
	pexpire = regexp.MustCompile(`^(\s*)redis\.call\('PEXPIRE', .*\)\s*$`)
	number  = regexp.MustCompile(`\b[0-9]+\b`)
)

// luaMutants lists the mutants of src: each operator flipped, each PX or
// NX argument and each PEXPIRE dropped, each number moved by one; never
// in a comment or a string.
func luaMutants(src string) []luaMutant {
	var out []luaMutant
	for i, line := range strings.Split(src, "\n") {
		code := codeOf(line)
		if strings.TrimSpace(code) == "" {
			continue
		}
		mask := stringMask(code)
		add := func(kind string, at, n int, repl string) {
			for k := at; k < at+n; k++ {
				if mask[k] {
					return
				}
			}
			out = append(out, luaMutant{i + 1, kind, line, line[:at] + repl + line[at+n:]})
		}
		for _, f := range flips {
			for at := 0; ; {
				k := strings.Index(code[at:], f.from)
				if k < 0 {
					break
				}
				add(f.kind+" "+strings.TrimSpace(f.from)+" → "+strings.TrimSpace(f.to), at+k, len(f.from), f.to)
				at += k + 1
			}
		}
		for _, m := range pxArg.FindAllStringIndex(code, -1) {
			out = append(out, luaMutant{i + 1, "drop PX", line, line[:m[0]] + line[m[1]:]})
		}
		for _, m := range nxArg.FindAllStringIndex(code, -1) {
			out = append(out, luaMutant{i + 1, "drop NX", line, line[:m[0]] + line[m[1]:]})
		}
		if m := pexpire.FindStringSubmatch(code); m != nil {
			out = append(out, luaMutant{i + 1, "drop PEXPIRE", line, m[1] + "-- (PEXPIRE dropped)"})
		}
		for _, m := range number.FindAllStringIndex(code, -1) {
			if m[0] > 0 && (isIdent(code[m[0]-1]) || code[m[0]-1] == '.') {
				continue // part of a name (fmt, ...)
			}
			n, err := strconv.Atoi(code[m[0]:m[1]])
			if err != nil {
				continue
			}
			add(fmt.Sprintf("off by one %d → %d", n, n+1), m[0], m[1]-m[0], strconv.Itoa(n+1))
		}
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// codeOf is line without its comment.
func codeOf(line string) string {
	mask := stringMask(line)
	for i := 0; i+1 < len(line); i++ {
		if line[i] == '-' && line[i+1] == '-' && !mask[i] {
			return line[:i]
		}
	}
	return line
}

// stringMask marks the bytes of line inside a string literal.
func stringMask(line string) []bool {
	mask := make([]bool, len(line)+1)
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			mask[i] = true
			if c == '\\' {
				i++
				if i < len(line) {
					mask[i] = true
				}
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
			mask[i] = true
		}
	}
	return mask
}

// luaRun mutates the library in a copy of the module, one mutant at a
// time, and runs the store tests on each.
func luaRun(root string, limit int, equiv map[string]string) result {
	r := result{name: "guard/redisstore (Lua)"}
	srcBytes, err := os.ReadFile(filepath.Join(root, luaFile))
	check(err)
	src := string(srcBytes)
	all := luaMutants(src)
	if limit > 0 && limit < len(all) {
		// an even spread over the file
		var some []luaMutant
		for i := range limit {
			some = append(some, all[i*len(all)/limit])
		}
		all = some
	}
	copyDir, err := copyModule(root)
	check(err)
	defer os.RemoveAll(copyDir)
	target := filepath.Join(copyDir, luaFile)
	fmt.Fprintf(os.Stderr, "== Lua: %d mutants, in %s\n", len(all), copyDir)
	began := time.Now()
	for n, m := range all {
		r.total++
		lines := strings.Split(src, "\n")
		lines[m.line-1] = m.to
		mutated := strings.Join(lines, "\n")
		where := fmt.Sprintf("%s:%d %s  %s", luaFile, m.line, m.kind, strings.TrimSpace(m.to))
		key := luaKey(m)
		if _, err := parse.Parse(strings.NewReader(mutated), "otpguard.lua"); err != nil {
			r.notViable++
			continue
		}
		check(os.WriteFile(target, []byte(mutated), 0o644))
		killedBy := ""
		for _, pkg := range []string{"./guard/memstore", "./guard/redisstore"} {
			if failed := goTest(copyDir, pkg, 15*time.Minute); failed {
				killedBy = pkg
				break
			}
		}
		status := "survived"
		switch {
		case killedBy != "":
			r.killed++
			status = "killed by " + killedBy
		default:
			if why, ok := equiv[key]; ok {
				r.equivalent = append(r.equivalent, where+"  ("+why+")")
				status = "equivalent"
			} else {
				r.survivors = append(r.survivors, where+"\n      equivalent.txt key: "+key)
			}
		}
		fmt.Fprintf(os.Stderr, "   %d/%d %s: %s (%s)\n", n+1, len(all), where, status, time.Since(began).Round(time.Second))
	}
	check(os.WriteFile(target, srcBytes, 0o644))
	return r
}

// luaKey names a Lua mutant in equivalent.txt.
func luaKey(m luaMutant) string {
	return luaFile + " | " + m.kind + " | " + strings.TrimSpace(m.to)
}

// goTest reports whether the tests of pkg failed (or hung past timeout).
func goTest(dir, pkg string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-failfast", "-timeout", timeout.String(), pkg)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && ctx.Err() == nil {
		check(fmt.Errorf("go test %s: %v: %s", pkg, err, out))
	}
	return err != nil
}

// copyModule copies the files git tracks under root into a new folder.
func copyModule(root string) (string, error) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		return "", fmt.Errorf("git ls-files: %w", err)
	}
	dir, err := os.MkdirTemp("", "mutate-lua-")
	if err != nil {
		return "", err
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}
