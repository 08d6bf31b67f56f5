package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/store"
)

// manyRules is a valid document of n rules (up to 6 × 4096), each
// written as an operator would: keys and actions varied, and names whose
// 12-bit state ids differ among the rules keyed alike.
func manyRules(n int) string {
	keys := []string{"[ip]", "[account]", "[destination]", "[account, ip]", "[prefix]", "[ip/24]"}
	actions := []string{"login", "signup", "otp.send", "otp.verify"}
	ids := make([]map[string]bool, len(keys))
	for k := range ids {
		ids[k] = map[string]bool{}
	}
	var b strings.Builder
	b.WriteString("rules:\n")
	for i, suffix := 0, 0; i < n; i++ {
		k := i % len(keys)
		name := ""
		for name == "" || ids[k][guard.Rule{Name: name, Algorithm: store.FixedWindow}.StateID()] {
			name = fmt.Sprintf("rule-%05d", suffix)
			suffix++
		}
		ids[k][guard.Rule{Name: name, Algorithm: store.FixedWindow}.StateID()] = true
		fmt.Fprintf(&b, "  - {name: %s, action: %s, key: %s, limit: %d, window: %dm}\n", name, actions[i%len(actions)], keys[k], 1+i%50, 1+i%60)
	}
	return b.String()
}

// nested is a list n levels deep around inner (in otp.sms, 3 more).
func nested(n int, inner string) string {
	return strings.Repeat("[", n) + inner + strings.Repeat("]", n)
}

// A document over a bound is refused with a LimitError naming the bound,
// before it is decoded: each document below is also invalid in a way the
// decoding or the validation would report (a YAML syntax error, unknown
// fields, invalid rules), and only the bound is reported. A document at
// a bound is read.
func TestConfigDocumentsAreBounded(t *testing.T) {
	pad := func(doc string, size int) string { return doc + "#" + strings.Repeat("x", size-len(doc)-2) + "\n" }
	rules := func(n int, rule string) string { return "rules:\n" + strings.Repeat("  - "+rule+"\n", n) }
	aliased := "rules:\n  - &r {name: a, action: login, key: [ip], limit: 1, window: 1m, color: red}\n" + strings.Repeat("  - *r\n", MaxRules)
	cases := []struct {
		name, doc string
		bound     string // "": no LimitError
		got       int
		message   string
	}{
		{"2 MB", "otp: [ {\n" + strings.Repeat("x", 2<<20), "MaxConfigBytes", 2<<20 + 9, "the document is 2097161 bytes; at most 262144 (config.MaxConfigBytes)"},
		{"one byte over", pad("otp: {length: 6}\n", MaxConfigBytes+1), "MaxConfigBytes", MaxConfigBytes + 1, ""},
		{"at the size bound", pad("otp: {length: 6}\n", MaxConfigBytes), "", 0, ""},
		{"20,000 rules as written", manyRules(20000), "MaxConfigBytes", len(manyRules(20000)), ""},
		{"20,000 small rules", rules(20000, "{x: 1}"), "MaxRules", 20000, "rules: 20000 rules; at most 2000 (config.MaxRules)"},
		{"one rule over", rules(MaxRules+1, "{x: 1}"), "MaxRules", MaxRules + 1, ""},
		{"rules that are aliases", aliased, "MaxRules", MaxRules + 1, ""},
		{"at the rules bound", manyRules(MaxRules), "", 0, ""},
		{"nested lists", "otp: {sms: {allowedCountries: " + nested(MaxConfigDepth, "x") + "}}", "MaxConfigDepth", MaxConfigDepth + 3, "the document nests 23 levels deep; at most 20 (config.MaxConfigDepth)"},
		{"nested through an alias", "otp: {purposes: &p " + nested(10, "x") + ", sms: {allowedCountries: " + nested(10, "*p") + "}}", "MaxConfigDepth", 23, ""},
		{"at the depth bound", "otp: {sms: {allowedCountries: " + nested(MaxConfigDepth-3, "x") + "}}", "", 0, ""},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc))
		var le *LimitError
		switch {
		case c.bound == "" && errors.As(err, &le):
			t.Errorf("%s: refused by a bound: %v", c.name, err)
		case c.name == "at the rules bound" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.bound != "" && (!errors.As(err, &le) || le.Bound != c.bound || le.Got != c.got):
			t.Errorf("%s: %v, want a LimitError on %s with %d", c.name, err, c.bound, c.got)
		case c.message != "" && err.Error() != "config: "+c.message:
			t.Errorf("%s: %q, want %q", c.name, err, "config: "+c.message)
		}
	}
}

// Duplicate names and names whose state ids collide among rules keyed
// alike are found by index, each naming the earlier rule.
func TestRuleNamesAndStateIDsAreUnique(t *testing.T) {
	// two names whose 12-bit state ids collide
	seen := map[string]string{}
	var a, b string
	for i := 0; b == ""; i++ {
		n := fmt.Sprintf("r%d", i)
		id := guard.Rule{Name: n, Algorithm: store.FixedWindow}.StateID()
		if other, ok := seen[id]; ok {
			a, b = other, n
		}
		seen[id] = n
	}
	rule := func(name, key string) string {
		return fmt.Sprintf("  - {name: %s, action: login, key: %s, limit: 5, window: 1m}\n", name, key)
	}
	doc := "rules:\n" + rule(a, "[ip, account]") + rule("other", "[ip]") + rule(b, "[account, ip]") + rule("other", "[account]") + rule(b, "[ip]")
	_, err := Parse([]byte(doc))
	got := fmt.Sprint(err)
	for _, want := range []string{
		fmt.Sprintf("rules[2].name: %q and rules[0] (%s) are keyed alike and their names hash to one state id", b, a),
		`rules[3].name: "other" is already the name of rules[1]`,
		fmt.Sprintf("rules[4].name: %q is already the name of rules[2]", b),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 3 {
		t.Errorf("%d problems, want 3:\n%s", n, got)
	}
	// keyed differently, the same ids do not collide
	if _, err := Parse([]byte("rules:\n" + rule(a, "[ip]") + rule(b, "[account]"))); err != nil {
		t.Errorf("rules keyed differently: %v", err)
	}
}

// An invalid document of many rules reports the first problems and
// counts the rest.
// manyBadLimits is n rules, each named apart, each with a limit of 0.
func manyBadLimits(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  - {name: r%d, action: login, key: [ip], limit: 0, window: 1m}\n", i)
	}
	return b.String()
}

func TestProblemsAreCapped(t *testing.T) {
	_, err := Parse([]byte(strings.Repeat("rules:\n", 1) + strings.Repeat("  - {name: r, action: login, key: [ip], limit: 0, window: 1m}\n", 1000)))
	lines := strings.Split(fmt.Sprint(err), "\n")
	// rules[0]'s limit, then every other rule's limit and name: 1999 problems
	if len(lines) != maxProblems+1 || lines[len(lines)-1] != fmt.Sprintf("config: and %d more problems", 1999-maxProblems) {
		t.Fatalf("%d lines, the last %q", len(lines), lines[len(lines)-1])
	}
	// exactly maxProblems validation problems (one bad limit per rule):
	// all of them, and no "and 0 more problems"
	_, err = Parse([]byte("rules:\n" + manyBadLimits(maxProblems)))
	if lines := strings.Split(fmt.Sprint(err), "\n"); len(lines) != maxProblems || strings.Contains(fmt.Sprint(err), "more problems") {
		t.Fatalf("%d problems: %d lines, the last %q", maxProblems, len(lines), lines[len(lines)-1])
	}
	// exactly maxProblems: all of them, and no "and 0 more"
	_, err = Parse([]byte("otp: {purposes: [" + strings.Repeat("[x], ", maxProblems) + "x]}"))
	if lines := strings.Split(fmt.Sprint(err), "\n"); len(lines) != maxProblems+1 || strings.Contains(fmt.Sprint(err), "more") {
		t.Fatalf("%d problems: %d lines, the last %q", maxProblems, len(lines), lines[len(lines)-1])
	}
	_, err = Parse([]byte("otp: {purposes: [" + strings.Repeat("[x], ", 1000) + "x]}"))
	if lines := strings.Split(fmt.Sprint(err), "\n"); len(lines) != maxProblems+2 || !strings.Contains(lines[len(lines)-1], "and 900 more") {
		t.Fatalf("unmarshal errors: %d lines, the last %q", len(lines), lines[len(lines)-1])
	}
}

// BenchmarkParse times valid documents of 500 and 2,000 rules
// (validation is linear in the rules: four times the rules, four times
// the time), and the refusal of a 2 MB document and of 20,000 rules (as
// written: over MaxConfigBytes; written small: over MaxRules).
func BenchmarkParse(b *testing.B) {
	for _, c := range []struct {
		name string
		doc  string
	}{
		{"500-rules", manyRules(500)},
		{"2000-rules", manyRules(2000)},
		{"20000-rules", manyRules(20000)},
		{"20000-small-rules", "rules:\n" + strings.Repeat("  - {x: 1}\n", 20000)},
		{"2MB", "# " + strings.Repeat("x", 2<<20) + "\n" + manyRules(10)},
	} {
		b.Run(c.name, func(b *testing.B) {
			doc := []byte(c.doc)
			for b.Loop() {
				_, _ = Parse(doc)
			}
		})
	}
}
