package queue

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/otpguard/otpguard/guard/message"
)

// A job's JSON is written and read here without reflection: a send's
// rendered email (its HTML most of it) went through encoding/json twice
// per send, about an eighth of the local server's CPU. The bytes are
// encoding/json's own (json.Encoder without HTML escapes, as jobs were
// written before: TestAJobIsWrittenAsEncodingJSONWritesIt), so a
// deliverer of either version reads a job of the other. readJob reads
// exactly that shape and nothing else: any other JSON (spaces, another
// member order, a member more or less, a job json.Marshal escaped for
// HTML) is read by encoding/json, which also has the last word on what
// is not JSON at all (FuzzReadJob).

// appendJob is j's JSON, as json.Encoder with SetEscapeHTML(false)
// writes it, without the newline.
func appendJob(b []byte, j Job) []byte {
	m := j.Message
	b = append(b, `{"i":`...)
	b = appendString(b, j.ID)
	b = append(b, `,"k":`...)
	b = appendString(b, j.Key)
	b = append(b, `,"m":{"Channel":`...)
	b = appendString(b, string(m.Channel))
	b = append(b, `,"To":`...)
	b = appendString(b, m.To)
	b = append(b, `,"Purpose":`...)
	b = appendString(b, m.Purpose)
	b = append(b, `,"Locale":`...)
	b = appendString(b, m.Locale)
	b = append(b, `,"Code":`...)
	b = appendString(b, m.Code)
	b = append(b, `,"Subject":`...)
	b = appendString(b, m.Subject)
	b = append(b, `,"Text":`...)
	b = appendString(b, m.Text)
	b = append(b, `,"HTML":`...)
	b = appendString(b, m.HTML)
	b = append(b, `,"Slot":`...)
	b = appendString(b, m.Slot)
	b = append(b, `,"TTL":`...)
	b = strconv.AppendInt(b, int64(m.TTL), 10)
	b = append(b, `,"Receipt":`...)
	b = appendString(b, m.Receipt)
	b = append(b, `},"e":`...)
	b = strconv.AppendInt(b, j.Expires, 10)
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString is s quoted as encoding/json quotes a string without HTML
// escapes: `"` and `\` and the control characters escaped (\b \f \n \r
// \t by name, the rest \u00XX), an invalid UTF-8 byte as \ufffd, and
// U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// decodeJob reads a job's JSON: readJob's way when it can, encoding/json's
// otherwise.
func decodeJob(plain []byte) (Job, error) {
	if j, ok := readJob(plain); ok {
		return j, nil
	}
	var j Job
	err := json.Unmarshal(plain, &j)
	return j, err
}

// readJob reads JSON of exactly appendJob's shape; ok is false for
// anything else, and then nothing of it is to be used.
func readJob(p []byte) (j Job, ok bool) {
	r := jobReader{p: p}
	m := &j.Message
	var ch, ttl string
	r.lit(`{"i":`)
	j.ID = r.str()
	r.lit(`,"k":`)
	j.Key = r.str()
	r.lit(`,"m":{"Channel":`)
	ch = r.str()
	r.lit(`,"To":`)
	m.To = r.str()
	r.lit(`,"Purpose":`)
	m.Purpose = r.str()
	r.lit(`,"Locale":`)
	m.Locale = r.str()
	r.lit(`,"Code":`)
	m.Code = r.str()
	r.lit(`,"Subject":`)
	m.Subject = r.str()
	r.lit(`,"Text":`)
	m.Text = r.str()
	r.lit(`,"HTML":`)
	m.HTML = r.str()
	r.lit(`,"Slot":`)
	m.Slot = r.str()
	r.lit(`,"TTL":`)
	ttl = r.num()
	r.lit(`,"Receipt":`)
	m.Receipt = r.str()
	r.lit(`},"e":`)
	e := r.num()
	r.lit(`}`)
	if r.bad || r.i != len(p) {
		return Job{}, false
	}
	d, err1 := strconv.ParseInt(ttl, 10, 64)
	exp, err2 := strconv.ParseInt(e, 10, 64)
	if err1 != nil || err2 != nil {
		return Job{}, false // out of range: encoding/json's error
	}
	m.Channel, m.TTL, j.Expires = message.Channel(ch), time.Duration(d), exp
	return j, true
}

// jobReader reads p from i on; bad is set at the first byte that is not
// what readJob reads, and every read after it is empty.
type jobReader struct {
	p   []byte
	i   int
	bad bool
}

// lit reads s.
func (r *jobReader) lit(s string) {
	if r.bad || len(r.p)-r.i < len(s) || string(r.p[r.i:r.i+len(s)]) != s {
		r.bad = true
		return
	}
	r.i += len(s)
}

// num reads a JSON integer: an optional minus, then 0 or digits not
// starting with 0.
func (r *jobReader) num() string {
	if r.bad {
		return ""
	}
	start := r.i
	if r.i < len(r.p) && r.p[r.i] == '-' {
		r.i++
	}
	digits := r.i
	for r.i < len(r.p) && r.p[r.i] >= '0' && r.p[r.i] <= '9' {
		r.i++
	}
	if n := r.i - digits; n == 0 || (n > 1 && r.p[digits] == '0') {
		r.bad = true
		return ""
	}
	return string(r.p[start:r.i])
}

// str reads a JSON string of valid UTF-8 with no control character in
// it, its escapes decoded; a \u escape of a surrogate is left to
// encoding/json (bad).
func (r *jobReader) str() string {
	if r.bad || r.i == len(r.p) || r.p[r.i] != '"' {
		r.bad = true
		return ""
	}
	r.i++
	start := r.i
	var out []byte // nil while no escape was met
	for r.i < len(r.p) {
		c := r.p[r.i]
		switch {
		case c == '"':
			raw := r.p[start:r.i]
			r.i++
			if !utf8.Valid(raw) {
				r.bad = true
				return ""
			}
			if out == nil {
				return string(raw)
			}
			return string(append(out, raw...))
		case c < 0x20:
			r.bad = true
			return ""
		case c == '\\':
			if !utf8.Valid(r.p[start:r.i]) {
				r.bad = true
				return ""
			}
			out = r.unescape(append(out, r.p[start:r.i]...))
			if r.bad {
				return ""
			}
			start = r.i
		default:
			r.i++
		}
	}
	r.bad = true
	return ""
}

// unescape reads the escape at r.i (a backslash, then what it escapes)
// and appends what it stands for to out.
func (r *jobReader) unescape(out []byte) []byte {
	if r.i+1 == len(r.p) {
		r.bad = true
		return out
	}
	esc := r.p[r.i+1]
	r.i += 2
	switch esc {
	case '"', '\\', '/':
		return append(out, esc)
	case 'b':
		return append(out, '\b')
	case 'f':
		return append(out, '\f')
	case 'n':
		return append(out, '\n')
	case 'r':
		return append(out, '\r')
	case 't':
		return append(out, '\t')
	case 'u':
		if len(r.p)-r.i < 4 {
			break
		}
		v, err := strconv.ParseUint(string(r.p[r.i:r.i+4]), 16, 16)
		if err != nil || utf16.IsSurrogate(rune(v)) {
			break
		}
		r.i += 4
		return utf8.AppendRune(out, rune(v))
	}
	r.bad = true
	return out
}
