package api

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/message"
)

func TestDecodeBytes(t *testing.T) {
	for _, c := range []struct {
		body  string
		field string // "" means accepted
	}{
		{`{"a":"x","b":"y"}`, ""},
		{` {"a":"x"} ` + "\n", ""},
		{`{"a":"x","c":{"d":"1","e":"2"}}`, ""},
		{`{"a":null}`, "a"}, // null is not a string
		{`{"c":null}`, "c"},
		{`{"c":{"d":1}}`, "c.d"},
		{`{"c":["x"]}`, "c"},
		{`{"s":{"in":"x","out":"y"}}`, "s.out"},
		{`{"s":{"in":"x","in":"y"}}`, "body"},
		{`{"a":"x","a":"y"}`, "body"},
		{`{"a":"x","c":{"d":1,"d":2}}`, "body"},
		{`{"a":"x","A":"y"}`, "A"},
		{`{"z":"x"}`, "z"},
		// an unknown member's value is read through, checked as JSON
		{`{"z":{"a":1,"b":[2,{"c":3}]},"a":"x"}`, "z"},
		{`{"z":{"a":1,"a":2}}`, "body"},
		{`{"z":{"a":1,"b":{"c":1,"c":2}}}`, "body"},
		{`{"z":{"a":1,"b":2,"a":3}}`, "body"},
		{`{"a":1}`, "a"},
		{`{"a":["x"]}`, "a"},
		{`{"a":"x"}{"b":"y"}`, "body"},
		{`{"a":"x"},`, "body"},
		{`[]`, "body"},
		{`"x"`, "body"},
		{``, "body"},
		{`{"a":"x` + "\xc3\x28" + `"}`, "body"},
		{`{"a":"x\u0000"}`, "body"},
		{`{"a":"x"`, "body"},
		{`{"a":"` + strings.Repeat("[", 100) + `"}`, ""},
		// a \u escape of half a surrogate pair would be read as U+FFFD:
		// two passwords would be one
		{`{"a":"x\ud800y"}`, "body"},
		{`{"a":"x\udfffy"}`, "body"},
		{`{"a":"x\uDBFF"}`, "body"},
		{`{"a":"x\udc00\ud800"}`, "body"},
		{`{"a":"x\ud800\u0041"}`, "body"},
		{`{"a":"\ud83d\ude00"}`, ""},       // a pair: 😀
		{`{"a":"\uDBFF\uDFFF"}`, ""},       // the last pair
		{`{"a":"\\ud800"}`, ""},            // a backslash, then "ud800"
		{`{"a":"\u00e9\ud7ff\ue000"}`, ""}, // around the surrogates
	} {
		var a, b, in string
		p := decodeBytes([]byte(c.body), fields{"a": &a, "b": &b, "c": new(map[string]string), "s": fields{"in": &in}})
		switch {
		case c.field == "" && p != nil:
			t.Errorf("%q: refused: %v %v", c.body, p, p.Errors)
		case c.field != "" && (p == nil || p.Status != 400 || p.Errors[c.field] == ""):
			t.Errorf("%q: want a 400 naming %q, got %+v", c.body, c.field, p)
		}
	}
	// A NUL anywhere, raw or escaped, is named as such (not as invalid
	// JSON): the first byte too.
	for _, body := range []string{"\x00{\"a\":\"x\"}", "{\"a\":\"x\"}\x00", "{\"a\":\"x\\u0000\"}"} {
		var a string
		if p := decodeBytes([]byte(body), fields{"a": &a}); p == nil || p.Errors["body"] != "the body holds a NUL character" {
			t.Errorf("%q: want the NUL named, got %+v", body, p)
		}
	}
}

func TestDecodeLimitsTheBody(t *testing.T) {
	r := httptest.NewRequest("POST", "/", strings.NewReader(`{"a":"`+strings.Repeat("x", MaxBody)+`"}`))
	r.Header.Set("Content-Type", "application/json")
	var a string
	if p := decode(httptest.NewRecorder(), r, fields{"a": &a}); p == nil || p.Status != 413 || p.Code != "payload_too_large" {
		t.Fatalf("got %+v", p)
	}
}

// Only JSON is taken: a cross-origin form or text/plain post (a CORS
// "simple request", sent without a preflight) is refused before its body
// is read.
func TestDecodeNeedsJSONMediaType(t *testing.T) {
	for ct, ok := range map[string]bool{
		"application/json": true, "application/json; charset=utf-8": true, "Application/JSON; charset=UTF-8": true,
		"": false, "text/plain": false, "text/plain; charset=utf-8": false, "application/x-www-form-urlencoded": false,
		"multipart/form-data; boundary=x": false, "application/json; charset=latin1": false, "application/jsonx": false,
		"application/json; boundary=x": false,
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(`{"a":"x"}`))
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		var a string
		p := decode(httptest.NewRecorder(), r, fields{"a": &a})
		if ok != (p == nil) || (!ok && (p.Status != 415 || p.Code != "unsupported_media_type")) {
			t.Errorf("Content-Type %q: got %+v, want accepted=%v", ct, p, ok)
		}
	}
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, c := range []struct {
		peer string
		xff  []string
		want string // "" = cannot be determined
	}{
		{"192.0.2.7:5555", nil, "192.0.2.7"},
		{"192.0.2.7:5555", []string{"203.0.113.9"}, "192.0.2.7"},                   // untrusted peer: header ignored
		{"[::ffff:192.0.2.7]:1", nil, "192.0.2.7"},                                 // IPv4-mapped
		{"10.1.2.3:80", []string{"203.0.113.9"}, "203.0.113.9"},                    // trusted proxy
		{"10.1.2.3:80", []string{"1.1.1.1, 203.0.113.9, 10.9.9.9"}, "203.0.113.9"}, // right-most untrusted
		{"10.1.2.3:80", []string{"1.1.1.1", "203.0.113.9"}, "203.0.113.9"},         // several header lines
		{"10.1.2.3:80", []string{"garbage, 203.0.113.9"}, "203.0.113.9"},
		{"10.1.2.3:80", []string{"203.0.113.9, garbage"}, "10.1.2.3"}, // unreadable hop: the proxy saw the sender
		{"10.1.2.3:80", nil, "10.1.2.3"},                              // no header: the proxy itself
		{"[2001:db8::1]:443", []string{"2001:db8::2, 2600::1"}, "2600::1"},
		{"not-an-address", nil, ""},
		{"", nil, ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		got, ok := clientIP(r, trusted)
		if (c.want == "") != !ok || (ok && got.String() != c.want) {
			t.Errorf("peer %q xff %q: got %v %v, want %q", c.peer, c.xff, got, ok, c.want)
		}
	}
}

func TestMask(t *testing.T) {
	for d, want := range map[guard.Destination]string{
		{Channel: message.Email, Address: "ann@example.com"}: "a***@example.com",
		{Channel: message.Email, Address: "a@example.com"}:   "a***@example.com",
		{Channel: message.SMS, Address: "+14155550123"}:      "+1********23",
		{Channel: message.SMS, Address: "+4477"}:             "*****",
	} {
		if got := mask(d); got != want {
			t.Errorf("mask(%s) = %q, want %q", d.Address, got, want)
		}
	}
}
