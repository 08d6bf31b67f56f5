package guard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
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
			if err == nil || !errors.Is(err, ErrInvalidInput) {
				t.Errorf("ParseEmail(%q) = %+v, %v; want ErrInvalidInput", c.in, d, err)
			}
			continue
		}
		if err != nil || d.Address != c.address || d.Key != c.key || d.Channel != Email {
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
			if err == nil || !errors.Is(err, ErrInvalidInput) {
				t.Errorf("ParsePhone(%q) = %+v, %v; want ErrInvalidInput", c.in, d, err)
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

func TestIPKeys(t *testing.T) {
	cases := []struct {
		in   string
		bits int
		want string
	}{
		{"192.0.2.1", 64, "192.0.2.1/32"},
		{"::ffff:192.0.2.1", 64, "192.0.2.1/32"}, // IPv4-mapped is IPv4
		{"::ffff:c000:201", 64, "192.0.2.1/32"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", 64, "2001:db8:1:2::/64"}, // same /64
		{"2001:db8:1:2ff:3:4:5:6", 56, "2001:db8:1:200::/56"},
		{"2001:db8:1:2ff:3:4:5:6", 48, "2001:db8:1::/48"},
		{"192.0.2.1", 48, "192.0.2.1/32"},
	}
	for _, c := range cases {
		a, err := ParseIP(c.in)
		if err != nil {
			t.Fatalf("ParseIP(%q): %v", c.in, err)
		}
		if got := IPKey(a, c.bits); got != c.want {
			t.Errorf("IPKey(%s, %d) = %s; want %s", c.in, c.bits, got, c.want)
		}
	}
	for _, bad := range []string{"", "1.2.3", "fe80::1%eth0", "example.com", "1.2.3.4:80"} {
		if _, err := ParseIP(bad); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("ParseIP(%q): want ErrInvalidInput, got %v", bad, err)
		}
	}
}

// Variants of one identity hash to one tag; different identities do not.
func TestSubjectHashFoldsVariants(t *testing.T) {
	g, err := New(DefaultConfig(), nil, Options{Secret: []byte("0123456789abcdef"), Backstop: nopStore{}})
	if err != nil {
		t.Fatal(err)
	}
	r := g.byAction["otp.send"][0]
	tag := func(email string) string {
		t.Helper()
		d, err := ParseEmail(email)
		if err != nil {
			t.Fatal(err)
		}
		tags, err := g.tags([]*rule{r}, Subject{Destination: d})
		if err != nil {
			t.Fatal(err)
		}
		return tags[0]
	}
	k := tag("victim@gmail.com")
	for _, v := range []string{"Victim@Gmail.com", "v.i.c.t.i.m+1@googlemail.com", "ｖｉｃｔｉｍ@gmail.com", " VICTIM+x@GMAIL.COM "} {
		if tag(v) != k {
			t.Errorf("%q counts apart from victim@gmail.com", v)
		}
	}
	if tag("victim2@gmail.com") == k {
		t.Error("two addresses share a tag")
	}
	ipRule := g.byName["otp-send-per-ip"]
	ipTag := func(a string) string {
		t.Helper()
		tags, err := g.tags([]*rule{ipRule}, Subject{IP: netip.MustParseAddr(a)})
		if err != nil {
			t.Fatal(err)
		}
		return tags[0]
	}
	if ipTag("2001:db8::1") != ipTag("2001:db8::ffff") {
		t.Error("two addresses of one /64 count apart")
	}
	if ipTag("2001:db8::1") == ipTag("2001:db8:0:1::1") {
		t.Error("two /64s count as one")
	}
	if ipTag("192.0.2.1") == ipTag("192.0.2.2") {
		t.Error("two IPv4 addresses count as one")
	}
	// A request without the dimension fails: it is never counted under an
	// empty value that every such request would share.
	if _, err := g.tags([]*rule{ipRule}, Subject{}); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("a request with no ip: want ErrInvalidInput, got %v", err)
	}
}

// The tags are a keyed hash: 128 bits (22 base64url characters), which a
// different secret changes entirely, so no one without the secret can
// test a guess against a key.
func TestTagsAreKeyedAnd128Bits(t *testing.T) {
	a, _ := New(DefaultConfig(), nil, Options{Secret: []byte("0123456789abcdef"), Backstop: nopStore{}})
	b, _ := New(DefaultConfig(), nil, Options{Secret: []byte("0123456789abcdeF"), Backstop: nopStore{}})
	cfg := DefaultConfig()
	d, err := ParsePhone("+1 201 555 0123", cfg.PhonePolicy())
	if err != nil {
		t.Fatal(err)
	}
	s := Subject{Destination: d, IP: netip.MustParseAddr("192.0.2.1"), Account: "victim"}
	for _, r := range a.all {
		if slices.Contains(r.Key, "global") {
			continue
		}
		ta, err := a.tags([]*rule{r}, s)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := b.tags([]*rule{b.all[slices.Index(a.all, r)]}, s)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.RawURLEncoding.DecodeString(ta[0])
		if err != nil || len(raw) != 16 {
			t.Errorf("%s: tag %q is not 128 bits of base64url", r.Name, ta[0])
		}
		if ta[0] == tb[0] {
			t.Errorf("%s: another secret gives the same tag %q", r.Name, ta[0])
		}
		// the same secret gives the same tag
		again, _ := a.tags([]*rule{r}, s)
		if again[0] != ta[0] {
			t.Errorf("%s: the tag is not stable", r.Name)
		}
	}
	// And it is exactly the first 128 bits of HMAC-SHA256 keyed with the
	// secret over the dimension and value.
	m := hmac.New(sha256.New, []byte("0123456789abcdef"))
	m.Write([]byte("destination\x00+12015550123\x00"))
	want := base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
	if got, _ := a.tags([]*rule{a.byAction["otp.send"][0]}, s); got[0] != want {
		t.Errorf("tag %q, want HMAC-SHA256/128 %q", got[0], want)
	}
	// A distinct rule's value names: the first 64 bits of the same HMAC
	// over "of", the dimension and the value.
	m.Reset()
	m.Write([]byte("of\x00ip\x00203.0.113.9"))
	want = base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:8])
	if got := a.valueHash("ip", "203.0.113.9"); got != want {
		t.Errorf("value hash %q, want HMAC-SHA256/64 %q", got, want)
	}
}

type nopStore struct{}

func (nopStore) Do(ctx context.Context, ops []Op) ([]OpResult, error) {
	return nil, ErrStoreUnavailable
}

func (nopStore) Begin([]Op)              {}
func (nopStore) End([]Op)                {}
func (nopStore) Mirror([]Op, []OpResult) {}
func (nopStore) Forget(string, string)   {}
