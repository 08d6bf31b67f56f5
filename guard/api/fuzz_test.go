package api

import (
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeBytes: every body is accepted or refused with a 4xx problem;
// an accepted body re-encodes (from what was decoded) to an equivalent
// body that decodes to the same values.
func FuzzDecodeBytes(f *testing.F) {
	for _, s := range []string{`{"a":"x","b":"y"}`, `{"a":"x","c":{"d":"1"}}`, `{"a":null}`, `{"a":"x","a":"y"}`, `{"A":"x"}`,
		`{"a":"x"}{}`, `[]`, ``, `{"s":{"in":"x"}}`, `{"a":"\ud800"}`, `{"a":"x\u0000"}`, `{"c":{"d":"1","d":"2"}}`, "{\"a\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var a, b, in string
		c := map[string]string{}
		p := decodeBytes(body, fields{"a": &a, "b": &b, "c": &c, "s": fields{"in": &in}})
		if p != nil {
			if p.Status < 400 || p.Status > 499 || p.Code == "" {
				t.Fatalf("%q: %+v", body, p)
			}
			return
		}
		re := map[string]any{"a": a, "b": b, "c": c, "s": map[string]string{"in": in}}
		raw, err := json.Marshal(re)
		if err != nil {
			t.Fatal(err)
		}
		var a2, b2, in2 string
		c2 := map[string]string{}
		if p := decodeBytes(raw, fields{"a": &a2, "b": &b2, "c": &c2, "s": fields{"in": &in2}}); p != nil {
			t.Fatalf("%q decoded, but its re-encoding %s does not: %+v", body, raw, p)
		}
		if a2 != a || b2 != b || in2 != in || len(c2) != len(c) {
			t.Fatalf("%q: %q %q %q %v, then %q %q %q %v", body, a, b, in, c, a2, b2, in2, c2)
		}
		for k, v := range c {
			if c2[k] != v {
				t.Fatalf("%q: c[%q]", body, k)
			}
		}
	})
}

// FuzzClientIP: the client is the peer, or one of the forwarded hops when
// the peer is trusted; never an address that appears nowhere.
// FuzzFlatDecode: whatever body the fast path (flat) takes, the token
// decoder takes too, into the same values; what flat leaves, it fills
// nothing of.
func FuzzFlatDecode(f *testing.F) {
	for _, s := range []string{`{"a":"x","b":"y"}`, ` { "a" : "x" , "b":"" } `, `{"a":"x","a":"y"}`, `{"a":"x",}`, `{"a":"x"}{}`, `{"A":"x"}`,
		`{"a":"x\"y"}`, `{"a":"x","c":{"d":"1"}}`, `{"a":1}`, `{}`, `{"a":"é"}`, "{\"a\":\"x\ty\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return // decodeBytes refuses it before either
		}
		var a, b, in string
		c := map[string]string{}
		fs := fields{"a": &a, "b": &b, "c": &c, "s": fields{"in": &in}}
		if !flat(body, fs) {
			if a != "" || b != "" {
				t.Fatalf("%q: flat declined it yet filled %q %q", body, a, b)
			}
			return
		}
		var a2, b2, in2 string
		c2 := map[string]string{}
		if p := decodeTokens(body, fields{"a": &a2, "b": &b2, "c": &c2, "s": fields{"in": &in2}}); p != nil {
			t.Fatalf("%q: flat took it, the decoder answers %+v", body, p)
		}
		if a2 != a || b2 != b || in2 != "" || len(c2) != 0 {
			t.Fatalf("%q: flat %q %q, the decoder %q %q %q %v", body, a, b, a2, b2, in2, c2)
		}
	})
}

func FuzzClientIP(f *testing.F) {
	for _, c := range [][2]string{{"10.0.0.1:1234", "198.51.100.1"}, {"10.0.0.1:1234", "198.51.100.1, 10.0.0.2"}, {"203.0.113.1:1", "1.2.3.4"},
		{"[2001:db8::1]:443", "garbage, 2001:db8::2"}, {"10.0.0.1:1", ""}, {"nonsense", "1.1.1.1"}} {
		f.Add(c[0], c[1])
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	f.Fuzz(func(t *testing.T, peer, xff string) {
		r := httptest.NewRequest("POST", "/", nil)
		r.RemoteAddr = peer
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		ip, ok := clientIP(r, trusted)
		if !ok {
			return
		}
		if !ip.IsValid() {
			t.Fatalf("%q %q: ok with an invalid address", peer, xff)
		}
		p, pok := parseHost(peer)
		if !pok {
			t.Fatalf("%q: an unreadable peer gave %v", peer, ip)
		}
		if ip == p {
			return
		}
		if !inAny(p, trusted) {
			t.Fatalf("an untrusted peer %v, yet the client is %v", p, ip)
		}
		found := false
		for _, h := range strings.Split(xff, ",") {
			if a, ok := parseHost(strings.TrimSpace(h)); ok && a == ip {
				found = true
			}
		}
		if !found {
			t.Fatalf("%q %q: the client %v is in no hop", peer, xff, ip)
		}
	})
}
