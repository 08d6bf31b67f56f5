package password

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"correct horse battery", true},
		{"Tr0ub4dor&3x", true},
		{"ünïcødé!", true},               // 8 code points, more bytes
		{"ｐａｓｓｗｏｒｄ", false},              // fullwidth: NFKC makes it "password"
		{"password", false},              // common
		{"PASSWORD", false},              // common, whatever the case
		{"12345678", false},              // common
		{"baseball1", false},             // common
		{"short", false},                 // 5 characters
		{"äöü1234", false},               // 7 code points (14 bytes)
		{"", false},                      //
		{strings.Repeat("x", 256), true}, //
		{strings.Repeat("x", 257), false},
		{"abc\xffdefgh", false},
	} {
		if err := Check(c.in); (err == nil) != c.ok {
			t.Errorf("Check(%q) = %v, want ok=%v", c.in, err, c.ok)
		}
	}
}

func TestTheListHoldsTenThousand(t *testing.T) {
	if n := len(common()); n != 10000 {
		t.Fatalf("%d common passwords, want 10000", n)
	}
	for _, p := range []string{"123456", "password", "qwerty", "letmein", "trustno1"} {
		if !Common(p) {
			t.Errorf("%q is not on the list", p)
		}
	}
}
