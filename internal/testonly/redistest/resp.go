package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// value is one RESP2/RESP3 value as read off the wire: raw holds its exact
// bytes (forwarded unchanged unless the proxy rewrites it), the other
// fields what the proxy needs to look at.
type value struct {
	raw   []byte
	kind  byte    // the type byte: + - : $ * % ~ > _ # , ( = |
	str   string  // simple, error, bulk, verbatim, numbers as text
	null  bool    // a RESP2 null bulk or array, or RESP3 _
	elems []value // array, set, push; map as key, value, key, value...
}

// readValue reads one whole value. An attribute (|) is kept with the value
// it annotates, as clients read them.
func readValue(r *bufio.Reader) (value, error) {
	var raw bytes.Buffer
	v, err := readInto(r, &raw)
	v.raw = raw.Bytes()
	return v, err
}

func readLine(r *bufio.Reader, raw *bytes.Buffer) (string, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return "", err
	}
	raw.Write(line)
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return "", errors.New("resp: line without CRLF")
	}
	return string(line[:len(line)-2]), nil
}

func readInto(r *bufio.Reader, raw *bytes.Buffer) (value, error) {
	line, err := readLine(r, raw)
	if err != nil {
		return value{}, err
	}
	if line == "" {
		return value{}, errors.New("resp: empty line")
	}
	v := value{kind: line[0], str: line[1:]}
	switch v.kind {
	case '+', '-', ':', '#', ',', '(':
		return v, nil
	case '_':
		v.null = true
		return v, nil
	case '$', '=':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return v, fmt.Errorf("resp: bad length %q", line)
		}
		if n < 0 {
			v.null, v.str = true, ""
			return v, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return v, err
		}
		raw.Write(buf)
		v.str = string(buf[:n])
		return v, nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return v, fmt.Errorf("resp: bad length %q", line)
		}
		if n < 0 {
			v.null = true
			return v, nil
		}
		if v.kind == '%' || v.kind == '|' {
			n *= 2
		}
		v.elems = make([]value, 0, n)
		for range n {
			e, err := readInto(r, raw)
			if err != nil {
				return v, err
			}
			v.elems = append(v.elems, e)
		}
		if v.kind == '|' {
			// the annotated value follows
			return readInto(r, raw)
		}
		return v, nil
	}
	return v, fmt.Errorf("resp: unknown type %q", line[0])
}

// readCommand reads a client's command: an array of bulk strings (what
// every client library sends), or an inline command.
func readCommand(r *bufio.Reader) ([]string, error) {
	v, err := readValue(r)
	if err != nil {
		return nil, err
	}
	if v.kind != '*' {
		if v.kind == '+' || v.kind == '-' || v.kind == ':' {
			return nil, errors.New("resp: not a command")
		}
		return nil, fmt.Errorf("resp: command of type %q", v.kind)
	}
	args := make([]string, len(v.elems))
	for i, e := range v.elems {
		args[i] = e.str
	}
	return args, nil
}

// command encodes args as a RESP array of bulk strings.
func command(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

func bulk(s string) []byte { return fmt.Appendf(nil, "$%d\r\n%s\r\n", len(s), s) }

func respError(msg string) []byte { return []byte("-" + msg + "\r\n") }
