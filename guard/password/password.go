// Package password is the signup password policy of NIST SP 800-63B
// (section 5.1.1.2): at least 8 characters (Unicode code points, after
// NFKC), at most 256, and not one of the 10,000 most common passwords. No
// composition rules (no "one digit, one symbol"), which the guideline
// advises against.
//
// The list (common.txt) is the first 10,000 entries of the password
// frequency list of zxcvbn 4.4.2 (MIT licence; ranked from the Xato corpus
// of 10 million leaked passwords), sorted. It is compared without regard
// to case.
package password

import (
	_ "embed"
	"errors"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The length bounds, in code points.
const (
	MinLength = 8
	MaxLength = 256
)

//go:embed common.txt
var commonText string

var common = sync.OnceValue(func() []string {
	return strings.Split(strings.TrimSuffix(commonText, "\n"), "\n")
})

// Check reports why p is not an acceptable new password, or nil.
func Check(p string) error {
	if p == "" {
		return errors.New("required")
	}
	if !utf8.ValidString(p) {
		return errors.New("must be valid UTF-8")
	}
	n := utf8.RuneCountInString(norm.NFKC.String(p))
	switch {
	case n < MinLength:
		return errors.New("must be at least 8 characters")
	case n > MaxLength:
		return errors.New("must be at most 256 characters")
	case Common(p):
		return errors.New("is one of the most common passwords; choose another")
	}
	return nil
}

// Common reports whether p is on the list of common passwords.
func Common(p string) bool {
	p = strings.ToLower(norm.NFKC.String(p))
	list := common()
	i := sort.SearchStrings(list, p)
	return i < len(list) && list[i] == p
}
