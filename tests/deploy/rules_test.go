package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// What CloudFormation checks before it creates anything: each parameter
// value against its constraints, then the template's Rules.

// ruleFunctions are the intrinsic functions the CloudFormation Rules
// section takes (the "Rule functions" of the template reference), and Ref.
var ruleFunctions = []string{"Fn::And", "Fn::Contains", "Fn::EachMemberEquals", "Fn::EachMemberIn", "Fn::Equals",
	"Fn::Not", "Fn::Or", "Fn::RefAll", "Fn::ValueOf", "Fn::ValueOfAll", "Ref"}

// refusals lists what CloudFormation would refuse the stack's parameters
// for: a parameter constraint, or a rule's assertion.
func (s *stack) refusals() []string {
	var out []string
	for name, p := range s.tmpl["Parameters"].(map[string]any) {
		out = append(out, s.constraint(name, p.(map[string]any))...)
	}
	for name, r := range s.tmpl["Rules"].(map[string]any) {
		rule := r.(map[string]any)
		if c, ok := rule["RuleCondition"]; ok && !s.ruleTruth(c) {
			continue
		}
		for _, a := range rule["Assertions"].([]any) {
			a := a.(map[string]any)
			if !s.ruleTruth(a["Assert"]) {
				out = append(out, fmt.Sprintf("rule %s: %v", name, a["AssertDescription"]))
			}
		}
	}
	slices.Sort(out)
	return out
}

// constraint checks one parameter's value as CloudFormation does.
func (s *stack) constraint(name string, p map[string]any) []string {
	v, ok := s.params[name]
	if !ok {
		return []string{name + ": no value and no default"}
	}
	var out []string
	bad := func(format string, a ...any) { out = append(out, name+": "+fmt.Sprintf(format, a...)) }
	typ := scalar(p["Type"])
	if pat, _ := p["AllowedPattern"].(string); pat != "" && !regexp.MustCompile(pat).MatchString(v) {
		bad("%q does not match AllowedPattern %s", v, pat)
	}
	if av, ok := p["AllowedValues"].([]any); ok {
		var allowed []string
		for _, a := range av {
			allowed = append(allowed, scalar(a))
		}
		if !slices.Contains(allowed, v) {
			bad("%q is not one of %v", v, allowed)
		}
	}
	if typ == "Number" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			bad("%q is not a number", v)
		} else {
			if m, ok := p["MinValue"]; ok && n < mustFloat(m) {
				bad("%v is below MinValue %v", v, m)
			}
			if m, ok := p["MaxValue"]; ok && n > mustFloat(m) {
				bad("%v is above MaxValue %v", v, m)
			}
		}
	}
	if m, ok := p["MaxLength"]; ok && float64(len(v)) > mustFloat(m) {
		bad("longer than MaxLength %v", m)
	}
	if m, ok := p["MinLength"]; ok && float64(len(v)) < mustFloat(m) {
		bad("shorter than MinLength %v", m)
	}
	return out
}

func mustFloat(v any) float64 {
	f, _ := strconv.ParseFloat(scalar(v), 64)
	return f
}

// ruleValue is a value inside a rule: a string, or a list of strings (a
// list parameter's Ref; an empty CommaDelimitedList is one empty member).
func (s *stack) ruleValue(e any) any {
	switch x := e.(type) {
	case string:
		return x
	case float64, bool:
		return scalar(x)
	case []any:
		var out []string
		for _, v := range x {
			out = append(out, scalar(s.ruleValue(v)))
		}
		return out
	case map[string]any:
		if name, ok := x["Ref"].(string); ok {
			p, isParam := s.tmpl["Parameters"].(map[string]any)[name].(map[string]any)
			if !isParam && !strings.HasPrefix(name, "AWS::") {
				s.t.Fatalf("a rule refers to %s, which is no parameter", name)
			}
			v := scalar(s.ref(name))
			if isParam && (strings.HasPrefix(scalar(p["Type"]), "List<") || p["Type"] == "CommaDelimitedList") {
				return strings.Split(s.params[name], ",")
			}
			return v
		}
	}
	s.t.Fatalf("a rule holds %v, which only a rule function or Ref may give", e)
	return nil
}

func (s *stack) ruleTruth(e any) bool {
	m, ok := e.(map[string]any)
	if !ok || len(m) != 1 {
		s.t.Fatalf("not a rule condition: %v", e)
	}
	for fn, arg := range m {
		a, _ := arg.([]any)
		switch fn {
		case "Fn::Equals":
			return scalar(s.ruleValue(a[0])) == scalar(s.ruleValue(a[1]))
		case "Fn::Not":
			return !s.ruleTruth(a[0])
		case "Fn::And":
			for _, x := range a {
				if !s.ruleTruth(x) {
					return false
				}
			}
			return true
		case "Fn::Or":
			for _, x := range a {
				if s.ruleTruth(x) {
					return true
				}
			}
			return false
		case "Fn::Contains":
			list, _ := s.ruleValue(a[0]).([]string)
			return slices.Contains(list, scalar(s.ruleValue(a[1])))
		case "Fn::EachMemberIn":
			list, _ := s.ruleValue(a[0]).([]string)
			in, _ := s.ruleValue(a[1]).([]string)
			for _, v := range list {
				if !slices.Contains(in, v) {
					return false
				}
			}
			return true
		case "Fn::EachMemberEquals":
			list, _ := s.ruleValue(a[0]).([]string)
			want := scalar(s.ruleValue(a[1]))
			for _, v := range list {
				if v != want {
					return false
				}
			}
			return true
		}
		s.t.Fatalf("rule function %s: not evaluated by this test", fn)
	}
	return false
}

// TestRulesUseRuleFunctionsOnly: the Rules section takes the rule
// functions and Ref only (the CloudFormation template reference, "Rules":
// Fn::Join or Fn::Split there is refused at create time, though cfn-lint,
// which shares the Conditions schema, accepts it).
func TestRulesUseRuleFunctionsOnly(t *testing.T) {
	tr := translatedTemplate(t)
	var walk func(path string, e any)
	walk = func(path string, e any) {
		switch x := e.(type) {
		case map[string]any:
			for k, v := range x {
				if (strings.HasPrefix(k, "Fn::") || k == "Ref" || k == "Condition") && !slices.Contains(ruleFunctions, k) {
					t.Errorf("%s uses %s, which is no rule function", path, k)
				}
				walk(path+"/"+k, v)
			}
		case []any:
			for i, v := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), v)
			}
		}
	}
	rules := tr["Rules"].(map[string]any)
	if len(rules) == 0 {
		t.Fatal("no Rules")
	}
	walk("Rules", rules)
	// and the rules still refuse what they are for
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"VpcEndpoints", "secretsmanager,dynamodb"}, "KnownVpcEndpoints"},
		{[]string{"CreateCache", "false"}, "ExistingCacheNeedsUrl"},
		{[]string{"AuthMode", "http"}, "HttpAuthNeedsUrl"},
	} {
		if _, refused := newStackOrRefusals(t, c.set...); !strings.Contains(strings.Join(refused, ";"), c.want) {
			t.Errorf("%v: refused for %v, want rule %s", c.set, refused, c.want)
		}
	}
	for _, ok := range [][]string{nil, {"VpcEndpoints", "secretsmanager,ssm,sns,kms,events,cognito-idp"}} {
		if _, refused := newStackOrRefusals(t, ok...); len(refused) > 0 {
			t.Errorf("%v: refused for %v", ok, refused)
		}
	}
}
