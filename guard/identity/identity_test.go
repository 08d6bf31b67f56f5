package identity

import (
	"errors"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/message"
)

func TestParseEmail(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := []struct {
		in, address, key string // key "" means rejected
	}{
		{"alice@example.com", "alice@example.com", "alice@example.com"},
		{"  Alice@Example.COM \t", "Alice@example.com", "alice@example.com"},
		{"ALICE@EXAMPLE.COM", "ALICE@example.com", "alice@example.com"},
		{"alice+promo@example.com", "alice+promo@example.com", "alice@example.com"},
		{"alice+a+b@example.com", "alice+a+b@example.com", "alice@example.com"},
		{"a.l.i.c.e@gmail.com", "a.l.i.c.e@gmail.com", "alice@gmail.com"},
		{"A.Lice+x@GoogleMail.com", "A.Lice+x@googlemail.com", "alice@gmail.com"},
		{"a.lice@example.com", "a.lice@example.com", "a.lice@example.com"}, // dots matter outside Gmail
		{"ａｌｉｃｅ@ｅｘａｍｐｌｅ.ｃｏｍ", "alice@example.com", "alice@example.com"},
		{"alice@bücher.de", "alice@xn--bcher-kva.de", "alice@xn--bcher-kva.de"},
		{"alice@BÜCHER.de", "alice@xn--bcher-kva.de", "alice@xn--bcher-kva.de"},
		{"alice@example.com.", "alice@example.com", "alice@example.com"},
		{long + "@example.com", long + "@example.com", long + "@example.com"},
		// rejected
		{"al\u200bice@example.com", "", ""}, // zero-width space
		{"alice\u200d@example.com", "", ""}, // zero-width joiner
		{"\u202ealice@example.com", "", ""}, // bidi override
		{"alice@exa\u200cmple.com", "", ""}, // zero-width non-joiner in the domain
		{"ali\u00adce@example.com", "", ""}, // soft hyphen
		{"alice\x00@example.com", "", ""},   // NUL
		{"ali\nce@example.com", "", ""},     // newline inside
		{"alicé@example.com", "", ""},       // non-ASCII local part
		{"\"a b\"@example.com", "", ""},     // quoted local part
		{"a b@example.com", "", ""},         // space
		{".alice@example.com", "", ""},      // misplaced dots
		{"alice.@example.com", "", ""},      //
		{"al..ice@example.com", "", ""},     //
		{"alice@", "", ""},                  //
		{"@example.com", "", ""},            //
		{"alice", "", ""},                   //
		{"alice@localhost", "", ""},         // one label
		{"alice@exa_mple.com", "", ""},      // not a host name
		{"alice@-example.com", "", ""},      //
		{"alice@example.123", "", ""},       // numeric TLD
		{"alice@[192.0.2.1]", "", ""},       // address literal
		{long + "a@example.com", "", ""},    // local part of 65
		{"a@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 63) + "." + strings.Repeat("e", 61) + ".com", "", ""}, // over 254
		{"alice@example.com\xff", "", ""}, // invalid UTF-8
		{"", "", ""},
	}
	for _, c := range cases {
		d, err := ParseEmail(c.in)
		if c.key == "" {
			if err == nil || !errors.Is(err, guard.ErrInvalidInput) {
				t.Errorf("ParseEmail(%q) = %+v, %v; want guard.ErrInvalidInput", c.in, d, err)
			}
			continue
		}
		if err != nil || d.Address != c.address || d.Key != c.key || d.Channel != message.Email {
			t.Errorf("ParseEmail(%q) = %q, %q, %v; want %q, %q", c.in, d.Address, d.Key, err, c.address, c.key)
		}
	}
}

func TestParsePhone(t *testing.T) {
	all := PhonePolicy{DefaultRegion: "US", AllowedTypes: []string{"mobile", "fixed_line_or_mobile"}}
	cases := []struct {
		in      string
		policy  PhonePolicy
		e164    string // "" means rejected
		country string
	}{
		{"+1 201-555-0123", all, "+12015550123", "US"},
		{"(201) 555-0123", all, "+12015550123", "US"},
		{"201.555.0123", all, "+12015550123", "US"},
		{"201 555 0123", all, "+12015550123", "US"},
		{"2015550123", all, "+12015550123", "US"},
		{"+12015550123", all, "+12015550123", "US"},
		{"1-201-555-0123", all, "+12015550123", "US"},
		{"tel:+1-201-555-0123", all, "+12015550123", "US"},
		{"＋１ ２０１ ５５５ ０１２３", all, "+12015550123", "US"}, // fullwidth
		{"  +1 201 555 0123  ", all, "+12015550123", "US"},
		{"+44 7400 123456", all, "+447400123456", "GB"},
		{"+44 (0)7400 123456", all, "+447400123456", "GB"},
		{"011 44 7400 123456", all, "+447400123456", "GB"}, // US international prefix
		{"07400 123456", PhonePolicy{DefaultRegion: "GB", AllowedTypes: all.AllowedTypes}, "+447400123456", "GB"},
		{"+33 6 12 34 56 78", all, "+33612345678", "FR"},
		{"+49 1512 3456789", all, "+4915123456789", "DE"},
		// rejected
		{"+1 900 555 0123", all, "", ""},  // US premium rate
		{"+44 909 879 0000", all, "", ""}, // GB premium rate
		{"+1 800 234 5678", all, "", ""},  // toll free
		{"+1 201 555 012", all, "", ""},   // too short
		{"+1 201 555 01234", all, "", ""}, // too long
		{"+882 1234 5678", all, "", ""},   // not a valid number
		{"001 201 555 0123", all, "", ""}, // 00 is not the US international prefix
		{"+1 201 555 0123 ext. 5", all, "", ""},
		{"+1 201\u200b555 0123", all, "", ""}, // zero-width space
		{"call me", all, "", ""},
		{"", all, "", ""},
		{strings.Repeat("1", 100), all, "", ""},
		{"+44 7400 123456", PhonePolicy{DefaultRegion: "US", AllowedCountries: []string{"US", "CA"}, AllowedTypes: all.AllowedTypes}, "", ""},
		{"+1 900 555 0123", PhonePolicy{DefaultRegion: "US", AllowedTypes: []string{"premium_rate"}}, "+19005550123", "US"},
	}
	for _, c := range cases {
		d, err := ParsePhone(c.in, c.policy)
		if c.e164 == "" {
			if err == nil || !errors.Is(err, guard.ErrInvalidInput) {
				t.Errorf("ParsePhone(%q) = %+v, %v; want guard.ErrInvalidInput", c.in, d, err)
			}
			continue
		}
		if err != nil || d.Address != c.e164 || d.Key != c.e164 || d.Country != c.country || d.Prefix != c.e164[:len(c.e164)-4] {
			t.Errorf("ParsePhone(%q) = %+v, %v; want %s in %s", c.in, d, err, c.e164, c.country)
		}
	}
}

func TestParseAccount(t *testing.T) {
	for in, want := range map[string]string{
		"alice":                  "alice",
		"  Alice ":               "alice",
		"ALICE":                  "alice",
		"ａｌｉｃｅ":                  "alice",
		"Straße":                 "strasse",
		"ǅemal":                  "džemal",
		"ﬁnn":                    "finn",
		"al\u200bice":            "",
		"":                       "",
		"   ":                    "",
		"a\x00":                  "",
		"\xff":                   "",
		strings.Repeat("a", 257): "",
	} {
		got, err := ParseAccount(in)
		if want == "" {
			if err == nil {
				t.Errorf("ParseAccount(%q) = %q; want an error", in, got)
			}
		} else if err != nil || got != want {
			t.Errorf("ParseAccount(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestParseIP(t *testing.T) {
	// The keys these addresses are counted by: guard's TestIPKeys.
	for _, in := range []string{"192.0.2.1", "::ffff:192.0.2.1", "::ffff:c000:201", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2ff:3:4:5:6"} {
		if _, err := ParseIP(in); err != nil {
			t.Fatalf("ParseIP(%q): %v", in, err)
		}
	}
	for _, bad := range []string{"", "1.2.3", "fe80::1%eth0", "example.com", "1.2.3.4:80"} {
		if _, err := ParseIP(bad); !errors.Is(err, guard.ErrInvalidInput) {
			t.Errorf("ParseIP(%q): want guard.ErrInvalidInput, got %v", bad, err)
		}
	}
}
