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
	"time"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/store"
)

// One key hashes to one tag; different keys and networks do not.
func TestSubjectHashFoldsVariants(t *testing.T) {
	g, err := New(testConfig(), nil, Options{Secret: []byte("0123456789abcdef"), Backstop: nopStore{}})
	if err != nil {
		t.Fatal(err)
	}
	r := g.byAction["otp.send"][0]
	tag := func(key string) string {
		t.Helper()
		tags, err := g.tags([]*rule{r}, Subject{Destination: Destination{Channel: message.Email, Address: key, Key: key}})
		if err != nil {
			t.Fatal(err)
		}
		return tags[0]
	}
	// (variants of an address are one key: guard/identity's tests)
	k := tag("victim@gmail.com")
	if tag("victim@gmail.com") != k {
		t.Error("one address, two tags")
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
	a, _ := New(testConfig(), nil, Options{Secret: []byte("0123456789abcdef"), Backstop: nopStore{}})
	b, _ := New(testConfig(), nil, Options{Secret: []byte("0123456789abcdeF"), Backstop: nopStore{}})
	d := Destination{Channel: message.SMS, Address: "+12015550123", Key: "+12015550123", Country: "US", Prefix: "+1201555", Type: "fixed_line_or_mobile"}
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
	// The deny cache's key for a distinct rule's value is that hash of
	// the value as the dimension formats it, hashed without the string.
	for _, dim := range []string{"ip", "ip/24", "destination", "account"} {
		want := a.valueHash(dim, a.Value(dim, s))
		if got := a.valueKeyOf(dim, s); string(got[:]) != want {
			t.Errorf("%s: the cache's value key %q, want %q", dim, got[:], want)
		}
	}
}

// testConfig is an engine configuration with a rule keyed on each
// dimension but asn (which needs Options.Networks), as the default
// rules are: otp.send's first rule is keyed on the destination.
func testConfig() Config {
	c := Config{StoreTimeout: 50 * time.Millisecond, DenyCacheTTL: 2 * time.Second, DenyCacheSize: 100, IPv6Prefix: 64, DeviceTTL: time.Hour}
	for _, d := range Dimensions {
		if d == "asn" {
			continue
		}
		name := "per-" + strings.ReplaceAll(d, "/", "")
		if d == "destination" || d == "ip" {
			name = "otp-send-per-" + d
		}
		c.Rules = append(c.Rules, Rule{Name: name, Action: "otp.send", Key: []string{d}, Limit: 2, Window: time.Minute,
			Algorithm: store.FixedWindow, Count: CountRequests, Mode: ModeEnforce, OnStoreError: "allow"})
	}
	return c
}

type nopStore struct{}

func (nopStore) Do(ctx context.Context, ops []store.Op) ([]store.OpResult, error) {
	return nil, store.ErrStoreUnavailable
}

func (nopStore) Begin([]store.Op)                    {}
func (nopStore) End([]store.Op)                      {}
func (nopStore) Mirror([]store.Op, []store.OpResult) {}
func (nopStore) Forget(string, string)               {}

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
		if got := ipKey(netip.MustParseAddr(c.in), c.bits); got != c.want {
			t.Errorf("ipKey(%s, %d) = %s; want %s", c.in, c.bits, got, c.want)
		}
	}
}

// TestAFingerprintIsItsKeyedHash: a subject's fingerprint is what the
// logs and metrics have always named it by (72 bits of HMAC-SHA256 of
// "log", the dimension and the value under the deployment secret), the
// same on every call and from goroutines at once, so a subject's
// decisions can be followed across calls, containers and versions.
func TestAFingerprintIsItsKeyedHash(t *testing.T) {
	key := []byte("0123456789abcdef")
	g, err := New(testConfig(), nil, Options{Secret: key, Backstop: nopStore{}})
	if err != nil {
		t.Fatal(err)
	}
	want := func(dim, value string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte("log\x00" + dim + "\x00" + value))
		return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:9])
	}
	if g.Fingerprint("destination", "") != "" {
		t.Fatal("an empty value has a fingerprint")
	}
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				dim, value := "destination", strings.Repeat("x", i)+"@example.com"
				if (i+w)%2 == 1 {
					dim, value = "ip", "192.0.2."+strings.Repeat("1", i%3+1)
				}
				if got := g.Fingerprint(dim, value); got != want(dim, value) {
					t.Errorf("Fingerprint(%q, %q) = %q, want %q", dim, value, got, want(dim, value))
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}

// TestATagHashesTheValuesAsWritten: a rule's tag is the keyed hash of its
// dimensions and their values as text (an address as its network, CIDR),
// formatted into the hash's buffer: the same keys as every version before
// (an upgrade keeps its counts), and the deny cache's key (which hashes
// without building the text) is the tag of the store's keys.
func TestATagHashesTheValuesAsWritten(t *testing.T) {
	g, _ := New(testConfig(), nil, Options{Secret: []byte("0123456789abcdef"), Backstop: nopStore{}})
	d := Destination{Channel: message.SMS, Address: "+12015550123", Key: "+12015550123", Country: "US", Prefix: "+1201555", Type: "fixed_line_or_mobile"}
	cases := []struct {
		ip   string
		dims []string
		want string // the hashed text
	}{
		{"192.0.2.7", []string{"ip"}, "ip\x00192.0.2.7/32\x00"},
		{"::ffff:192.0.2.7", []string{"ip"}, "ip\x00192.0.2.7/32\x00"},
		{"2001:db8:1:2ff:3:4:5:6", []string{"ip"}, "ip\x002001:db8:1:2ff::/64\x00"},
		{"2001:db8:1:2ff:3:4:5:6", []string{"ip/56"}, "ip/56\x002001:db8:1:200::/56\x00"},
		{"2001:db8:1:2ff:3:4:5:6", []string{"ip/48"}, "ip/48\x002001:db8:1::/48\x00"},
		{"192.0.2.7", []string{"ip/48"}, "ip/48\x00192.0.2.7/32\x00"},
		{"192.0.2.7", []string{"ip/24"}, "ip/24\x00192.0.2.0/24\x00"},
		{"2001:db8:1:2ff:3:4:5:6", []string{"ip/24"}, "ip/24\x002001:db8:1::/48\x00"},
		{"192.0.2.7", []string{"ip/16"}, "ip/16\x00192.0.0.0/16\x00"},
		{"2001:db8:1:2ff:3:4:5:6", []string{"ip/16"}, "ip/16\x002001:db8::/32\x00"},
		{"192.0.2.7", []string{"asn"}, "asn\x00192.0.0.0/16\x00"}, // no database: its network
		{"192.0.2.7", []string{"destination", "ip/16"}, "destination\x00+12015550123\x00ip/16\x00192.0.0.0/16\x00"},
		{"192.0.2.7", []string{"country"}, "country\x00US\x00"},
		{"192.0.2.7", []string{"prefix"}, "prefix\x00+1201555\x00"},
		{"192.0.2.7", []string{"account", "device"}, "account\x00Ann \x00device\x00ann\x00dev1\x00"},
	}
	for _, c := range cases {
		s := Subject{Destination: d, IP: netip.MustParseAddr(c.ip), Account: "Ann ", device: "dev1"}
		m := hmac.New(sha256.New, []byte("0123456789abcdef"))
		m.Write([]byte(c.want))
		want := base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
		r := &rule{dims: c.dims}
		tags := make([]string, 1)
		if got := g.tag([]*rule{r}, tags, 0, s); got != want {
			t.Errorf("%s %v: tag %q, want the hash of %q", c.ip, c.dims, got, c.want)
		}
		if k := g.subjectTag(c.dims, s); string(k[:]) != want {
			t.Errorf("%s %v: the cache's tag %q, want %q", c.ip, c.dims, k[:], want)
		}
	}
	s := Subject{ASN: 64500}
	if got, want := g.Value("asn", s), "AS64500"; got != want {
		t.Errorf("asn value %q, want %q", got, want)
	}
}
