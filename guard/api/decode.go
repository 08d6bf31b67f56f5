package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxBody is the largest request body accepted; larger gets 413.
const MaxBody = 8 << 10

// fields describes the members a JSON object may have: each name maps to
// a *string, a *bool, a *map[string]string (an object of strings), or a
// fields (a nested object of known members).
type fields map[string]any

// decode reads r's body as one JSON object whose members are some of f,
// strictly, in one pass: a media type other than application/json → 415;
// over MaxBody → 413; invalid UTF-8, NUL, invalid JSON, not an object,
// duplicate member names at any depth, unknown (or differently cased)
// members, wrong types (null included), trailing data → 400 naming the
// problem.
func decode(w http.ResponseWriter, r *http.Request, f fields) *Problem {
	if p := checkMediaType(r); p != nil {
		return p
	}
	body, p := readBody(w, r)
	if p != nil {
		return p
	}
	return decodeBytes(body, f)
}

// BodyTimeout bounds the reading of a request body, from when its handler
// starts to read it: a client that sends it slower gets a 408.
const BodyTimeout = 5 * time.Second

// readBody reads at most MaxBody bytes of r's body (over it: 413), within
// BodyTimeout (else 408, and the connection closes).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *Problem) {
	if r.ContentLength > MaxBody {
		return nil, problem("payload_too_large", fmt.Sprintf("the body is over %d bytes", MaxBody))
	}
	// Where the connection is ours (the local server); Lambda's events
	// arrive whole and ignore it.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, problem("payload_too_large", fmt.Sprintf("the body is over %d bytes", MaxBody))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return nil, problem("request_timeout", "the body did not arrive within "+BodyTimeout.String())
		}
		return nil, badBody("the body could not be read")
	}
	return body, nil
}

// checkMediaType requires Content-Type: application/json (with at most a
// charset of utf-8): a browser cannot send that from another origin
// without a CORS preflight, which only network.allowedOrigins pass.
func checkMediaType(r *http.Request) *Problem {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; len(params) == 0 || (ok && len(params) == 1 && strings.EqualFold(cs, "utf-8")) {
			return nil
		}
	}
	return problem("unsupported_media_type", "send the body as Content-Type: application/json")
}

func decodeBytes(body []byte, f fields) *Problem {
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		return badBody("the body is empty; send a JSON object")
	case !utf8.Valid(body):
		return badBody("the body is not valid UTF-8")
	case bytes.IndexByte(body, 0) >= 0 || bytes.Contains(body, []byte(`\u0000`)):
		return badBody("the body holds a NUL character")
	case loneSurrogate(body):
		// encoding/json would read it as U+FFFD: two different
		// passwords (or names) would become one
		return badBody("the body holds a \\u escape of half a UTF-16 surrogate pair")
	}
	if flat(body, f) {
		return nil
	}
	return decodeTokens(body, f)
}

// decodeTokens is decodeBytes's reading of a body that passed its checks,
// token by token.
func decodeTokens(body []byte, f fields) *Problem {
	d := &decoder{dec: json.NewDecoder(bytes.NewReader(body)), errs: map[string]string{}}
	d.dec.UseNumber()
	t, err := d.dec.Token()
	if err != nil {
		return badBody("the body is not valid JSON")
	}
	if t != json.Delim('{') {
		return badBody("the body must be a JSON object")
	}
	if err := d.object("", f); err != nil {
		return badBody(err.Error())
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return badBody("trailing data after the JSON object")
	}
	if len(d.errs) > 0 {
		return invalidRequest(d.errs)
	}
	return nil
}

// loneSurrogate reports a \uD800–\uDFFF escape that is not half of a
// high-then-low pair.
func loneSurrogate(body []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range body[i+2 : i+6] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		switch {
		case !ok:
			i++ // an escaped character (\\ included): skip it
		case r >= 0xD800 && r <= 0xDBFF:
			low, ok := hex4(i + 6)
			if !ok || low < 0xDC00 || low > 0xDFFF {
				return true
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		default:
			i += 5
		}
	}
	return false
}

// decoder walks the body's tokens once, filling the destinations and
// noting each member it cannot take.
type decoder struct {
	dec  *json.Decoder
	errs map[string]string
}

var errSyntax = errors.New("the body is not valid JSON")

// object reads the members of an object whose '{' was read, up to its '}'.
// Members are checked against f; f nil accepts any member of string value
// into *map (see strings).
func (d *decoder) object(path string, f fields) error {
	var seen []string
	for d.dec.More() {
		kt, err := d.dec.Token()
		if err != nil {
			return errSyntax
		}
		k, _ := kt.(string)
		if slices.Contains(seen, k) {
			return fmt.Errorf("duplicate member %q", strings.TrimPrefix(path+"."+k, "."))
		}
		seen = append(seen, k)
		name := strings.TrimPrefix(path+"."+k, ".")
		dst, known := f[k]
		if !known {
			d.errs[name] = "unknown field"
			if err := d.skip(name); err != nil {
				return err
			}
			continue
		}
		if err := d.value(name, dst); err != nil {
			return err
		}
	}
	if _, err := d.dec.Token(); err != nil { // the closing '}'
		return errSyntax
	}
	return nil
}

func (d *decoder) value(name string, dst any) error {
	t, err := d.dec.Token()
	if err != nil {
		return errSyntax
	}
	switch dst := dst.(type) {
	case *string:
		if s, ok := t.(string); ok {
			*dst = s
			return nil
		}
		d.errs[name] = "must be a string"
	case *bool:
		if b, ok := t.(bool); ok {
			*dst = b
			return nil
		}
		d.errs[name] = "must be true or false"
	case *map[string]string:
		if t == json.Delim('{') {
			return d.strings(name, dst)
		}
		d.errs[name] = "must be an object of strings"
	case fields:
		if t == json.Delim('{') {
			return d.object(name, dst)
		}
		d.errs[name] = "must be an object"
	}
	return d.rest(name, t)
}

// strings reads an object of string members into *m.
func (d *decoder) strings(name string, m *map[string]string) error {
	out := map[string]string{}
	for d.dec.More() {
		kt, err := d.dec.Token()
		if err != nil {
			return errSyntax
		}
		k, _ := kt.(string)
		if _, dup := out[k]; dup {
			return fmt.Errorf("duplicate member %q", name+"."+k)
		}
		t, err := d.dec.Token()
		if err != nil {
			return errSyntax
		}
		if s, ok := t.(string); ok {
			out[k] = s
			continue
		}
		d.errs[name+"."+k] = "must be a string"
		out[k] = ""
		if err := d.rest(name+"."+k, t); err != nil {
			return err
		}
	}
	if _, err := d.dec.Token(); err != nil {
		return errSyntax
	}
	*m = out
	return nil
}

// skip reads and drops one value.
func (d *decoder) skip(name string) error {
	t, err := d.dec.Token()
	if err != nil {
		return errSyntax
	}
	return d.rest(name, t)
}

// rest drops the rest of a value whose first token was t, still checking
// nested objects for duplicate members.
func (d *decoder) rest(name string, t json.Token) error {
	switch t {
	case json.Delim('{'):
		var seen []string
		for d.dec.More() {
			kt, err := d.dec.Token()
			if err != nil {
				return errSyntax
			}
			k, _ := kt.(string)
			if slices.Contains(seen, k) {
				return fmt.Errorf("duplicate member %q", name+"."+k)
			}
			seen = append(seen, k)
			if err := d.skip(name + "." + k); err != nil {
				return err
			}
		}
	case json.Delim('['):
		for d.dec.More() {
			if err := d.skip(name + "[]"); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	if _, err := d.dec.Token(); err != nil {
		return errSyntax
	}
	return nil
}
