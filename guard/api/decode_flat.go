package api

import "bytes"

// flat decodes the common body at a fraction of the decoder's cost: one
// object of plain strings (no escape in them), every member a distinct
// one of f's that takes a string, nothing after it. It fills them as the
// decoder would and reports true; for anything else (an escape, a nested
// or non-string value, an unknown or repeated member, invalid JSON) it
// fills nothing and reports false, and the decoder reads the body. The
// body is valid UTF-8 (decodeBytes checked).
func flat(body []byte, f fields) bool {
	const most = 8
	var keys, vals [most][]byte
	var dsts [most]*string
	n := 0
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return false
	}
	for {
		k, j, ok := plainString(body, skipSpace(body, i+1))
		if !ok {
			return false
		}
		if i = skipSpace(body, j); i == len(body) || body[i] != ':' {
			return false
		}
		v, j, ok := plainString(body, skipSpace(body, i+1))
		if !ok || n == most {
			return false
		}
		dst, ok := f[string(k)].(*string)
		if !ok {
			return false
		}
		for _, seen := range keys[:n] {
			if bytes.Equal(seen, k) {
				return false
			}
		}
		keys[n], vals[n], dsts[n] = k, v, dst
		n++
		if i = skipSpace(body, j); i == len(body) {
			return false
		}
		if body[i] == '}' {
			break
		}
		if body[i] != ',' {
			return false
		}
	}
	if skipSpace(body, i+1) != len(body) {
		return false
	}
	for m := range n {
		*dsts[m] = string(vals[m])
	}
	return true
}

// plainString reads the JSON string at body[i:] if it holds no escape
// and no control character: its contents, and where it ends.
func plainString(body []byte, i int) (s []byte, end int, ok bool) {
	if i == len(body) || body[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(body); j++ {
		switch c := body[j]; {
		case c == '"':
			return body[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// skipSpace is the index of the first byte from i on that is not JSON
// whitespace.
func skipSpace(body []byte, i int) int {
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r') {
		i++
	}
	return i
}
