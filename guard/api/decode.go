package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxBody is the largest request body accepted; larger gets 413.
const MaxBody = 8 << 10

// decode reads r's body as one JSON object whose members are exactly some
// of fields (name → pointer to a string or other value), strictly: over
// MaxBody → 413; invalid UTF-8, NUL, invalid JSON, not an object,
// duplicate or unknown (or differently cased) member names, wrong types,
// trailing data → 400 naming the problem.
func decode(w http.ResponseWriter, r *http.Request, fields map[string]any) *Problem {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return problem("payload_too_large", fmt.Sprintf("the body is over %d bytes", MaxBody))
		}
		return badBody("the body could not be read")
	}
	return decodeBytes(body, fields)
}

func decodeBytes(body []byte, fields map[string]any) *Problem {
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		return badBody("the body is empty; send a JSON object")
	case !utf8.Valid(body):
		return badBody("the body is not valid UTF-8")
	case bytes.IndexByte(body, 0) >= 0 || bytes.Contains(body, []byte(`\u0000`)):
		return badBody("the body holds a NUL character")
	case bytes.TrimLeft(body, " \t\r\n")[0] != '{':
		return badBody("the body must be a JSON object")
	}
	if err := checkJSON(body); err != nil {
		return badBody(err.Error())
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		return badBody("the body is not valid JSON")
	}
	errs := map[string]string{}
	for name, raw := range members {
		dst, ok := fields[name]
		if !ok {
			errs[name] = "unknown field"
			continue
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			errs[name] = "must be " + typeName(dst)
		}
	}
	if len(errs) > 0 {
		return invalidRequest(errs)
	}
	return nil
}

// checkJSON checks body is one JSON value with no duplicate member names
// at any depth and nothing after it.
func checkJSON(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var walk func(path string) error
	walk = func(path string) error {
		t, err := dec.Token()
		if err != nil {
			return errors.New("the body is not valid JSON")
		}
		switch t {
		case json.Delim('{'):
			var seen []string
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return errors.New("the body is not valid JSON")
				}
				k, _ := kt.(string)
				if slices.Contains(seen, k) {
					return fmt.Errorf("duplicate member %q", strings.TrimPrefix(path+"."+k, "."))
				}
				seen = append(seen, k)
				if err := walk(path + "." + k); err != nil {
					return err
				}
			}
		case json.Delim('['):
			for dec.More() {
				if err := walk(path + "[]"); err != nil {
					return err
				}
			}
		default:
			return nil
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return errors.New("the body is not valid JSON")
		}
		return nil
	}
	if err := walk(""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func typeName(dst any) string {
	switch dst.(type) {
	case *string:
		return "a string"
	case *bool:
		return "a boolean"
	case *int, *int64, *float64:
		return "a number"
	}
	return "an object of the documented shape"
}
