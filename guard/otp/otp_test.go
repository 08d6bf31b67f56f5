package otp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"math"
	"strconv"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
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

// TestACodesKeyAndHashAreTheirDefinition: a code's key and stored hash
// are what every version has written (the key 128 bits of HMAC-SHA256 of
// the address and purpose, the hash HMAC-SHA256 of that tag, the address
// and the code), the same from goroutines at once, so a code sent before
// a deploy verifies after it.
func TestACodesKeyAndHashAreTheirDefinition(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	c, err := New(config.Default(), nil, secret)
	if err != nil {
		t.Fatal(err)
	}
	mac := func(s string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(s))
		return m.Sum(nil)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				d := guard.Destination{Address: strconv.Itoa(w*1000+i) + "@example.com"}
				code := strconv.Itoa(100000 + i)
				tag := base64.RawURLEncoding.EncodeToString(mac("otp\x00" + d.Address + "\x00login")[:16])
				want := base64.RawURLEncoding.EncodeToString(mac("code\x00" + tag + "\x00" + d.Address + "\x00" + code))
				if key, digest := c.keyDigest(d, "login", code); key != "og:{"+tag+"}:otp" || digest != want {
					t.Errorf("keyDigest(%s, %s) = %s %s, want og:{%s}:otp %s", d.Address, code, key, digest, tag, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
