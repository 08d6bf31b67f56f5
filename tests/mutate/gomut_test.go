package main

import (
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
