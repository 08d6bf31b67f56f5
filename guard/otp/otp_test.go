package otp

import (
	"math"
	"testing"
)

func TestGenerateIsUniformDigits(t *testing.T) {
	// 10,000 codes of 6 digits: each digit value at each position should
	// appear ~1,000 times. A chi-square over the 60 cells with 54 degrees
	// of freedom above 110 happens by chance about once in 100,000 runs.
	const n = 10000
	var counts [6][10]int
	for range n {
		c, err := Generate(6)
		if err != nil {
			t.Fatal(err)
		}
		if len(c) != 6 {
			t.Fatalf("code %q is not 6 long", c)
		}
		for i, r := range c {
			if r < '0' || r > '9' {
				t.Fatalf("code %q holds %q", c, r)
			}
			counts[i][r-'0']++
		}
	}
	chi := 0.0
	for _, pos := range counts {
		for _, got := range pos {
			chi += math.Pow(float64(got)-n/10, 2) / (n / 10)
		}
	}
	if chi > 110 {
		t.Errorf("chi-square %.1f: the digits are not uniform: %v", chi, counts)
	}
	for _, bad := range []int{0, 19} {
		if _, err := Generate(bad); err == nil {
			t.Errorf("Generate(%d) accepted", bad)
		}
	}
	if c, _ := Generate(10); len(c) != 10 {
		t.Errorf("Generate(10) = %q", c)
	}
}
