package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestCoverageReachesCaseExpressions: a switch's case expressions lie
// between the profile's blocks; they ran when the block before them did,
// and a block any test binary ran is covered though others did not.
func TestCoverageReachesCaseExpressions(t *testing.T) {
	cov, err := readCoverage(strings.NewReader(`mode: set
m/p/f.go:10.20,12.9 2 1
m/p/f.go:13.3,14.4 1 0
m/p/f.go:20.2,22.3 1 0
m/p/f.go:30.2,31.3 1 0
m/p/f.go:30.2,31.3 1 1
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		line, col int
		want      bool
	}{
		{11, 5, true},  // inside a block that ran
		{13, 5, false}, // inside one that did not
		{12, 15, true}, // a case expression after a block that ran
		{15, 1, false}, // after one that did not
		{31, 1, true},  // one test binary ran it
		{5, 1, false},  // before every block
	} {
		if got := cov.covered("f.go", c.line, c.col); got != c.want {
			t.Errorf("%d:%d covered %v, want %v", c.line, c.col, got, c.want)
		}
	}
}

// TestMutantsOfCaseExpressionsAreAnchoredToTheirSwitch: a case's
// expression and an else-if's condition read coverage where their
// switch or first if is.
func TestMutantsOfCaseExpressionsAreAnchoredToTheirSwitch(t *testing.T) {
	dir := t.TempDir()
	src := `package p

const k = 1 + 2

func f(a, b int) int {
	switch {
	case a > b:
		return 1
	}
	if a == 1 {
		return 2
	} else if b == 2 {
		return 3
	}
	return a + b
}
`
	path := dir + "/p.go"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ms, err := goMutants(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string][2]int{}
	for _, m := range ms {
		if m.static != (m.line == 3) {
			t.Errorf("%d:%s static %v: only the constant's is", m.line, m.typ, m.static)
		}
		anchors[fmt.Sprintf("%d:%s", m.line, m.typ)] = [2]int{m.aline, m.acol}
	}
	for k, want := range map[string][2]int{
		"7:CONDITIONALS_BOUNDARY":  {6, 2},   // case a > b: the switch
		"10:CONDITIONALS_NEGATION": {10, 7},  // the first if's own condition
		"12:CONDITIONALS_NEGATION": {10, 2},  // else if b == 2: the first if
		"15:ARITHMETIC_BASE":       {15, 11}, // a + b: itself
	} {
		if anchors[k] != want {
			t.Errorf("%s anchored at %v, want %v", k, anchors[k], want)
		}
	}
}
