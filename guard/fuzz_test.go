package guard_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/message"
)

// FuzzParseEmail: whatever is accepted re-parses to the same key and
// address (normalization is idempotent), and the key holds no upper case.
func FuzzParseEmail(f *testing.F) {
	for _, s := range []string{"Ann@Example.com", "a.b+tag@gmail.com", " x@EXAMPLE.org ", "ｆｏｏ@ｂａｒ.com", "u@bücher.de",
		"a@b", "@example.com", "a@@b.c", "a\u200b@b.com", "\"q\"@b.com", "a@xn--bcher-kva.de", strings.Repeat("a", 65) + "@b.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := identity.ParseEmail(s)
		if err != nil {
			return
		}
		if !utf8.ValidString(d.Key) || d.Key != strings.ToLower(d.Key) || d.Channel != message.Email {
			t.Fatalf("%q: key %q", s, d.Key)
		}
		again, err := identity.ParseEmail(d.Address)
		if err != nil {
			t.Fatalf("%q parsed to %q, which does not parse: %v", s, d.Address, err)
		}
		if again.Key != d.Key || again.Address != d.Address {
			t.Fatalf("not idempotent: %q -> %+v -> %+v", s, d, again)
		}
		if k, err := identity.ParseEmail(d.Key); err != nil || k.Key != d.Key {
			t.Fatalf("the key %q of %q is not its own key: %+v %v", d.Key, s, k, err)
		}
	})
}

// FuzzParsePhone: an accepted number is E.164 and re-parses to itself.
func FuzzParsePhone(f *testing.F) {
	for _, s := range []string{"+14155552671", "(415) 555-2671", "+44 7911 123456", "+33 6 12 34 56 78", "0044 7911 123456",
		"+1900555000", "+", "12", "+999999999999999999", "+1 415 555 2671 ext 5"} {
		f.Add(s)
	}
	cfg := config.Default()
	p := cfg.OTP.SMS.Policy()
	f.Fuzz(func(t *testing.T, s string) {
		d, err := identity.ParsePhone(s, p)
		if err != nil {
			return
		}
		if !strings.HasPrefix(d.Address, "+") || d.Key != d.Address || d.Country == "" {
			t.Fatalf("%q: %+v", s, d)
		}
		again, err := identity.ParsePhone(d.Address, p)
		if err != nil || again != d {
			t.Fatalf("not idempotent: %q -> %+v -> %+v %v", s, d, again, err)
		}
	})
}

// FuzzParseIP: an accepted address re-parses to itself.
func FuzzParseIP(f *testing.F) {
	for _, s := range []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db8::1", "fe80::1%eth0", "1.2.3", "", "::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := identity.ParseIP(s)
		if err != nil {
			return
		}
		b, err := identity.ParseIP(a.String())
		if err != nil || a != b || a.Is4In6() || a.Zone() != "" {
			t.Fatalf("%q -> %v -> %v %v", s, a, b, err)
		}
	})
}
