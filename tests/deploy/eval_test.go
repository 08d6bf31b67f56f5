package deploy

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// stack is the translated template evaluated as CloudFormation would for
// one set of parameter values: conditions decided, Ref, Fn::Sub, Fn::If,
// Fn::Join, Fn::Select and Fn::Split resolved. Resources resolve to
// values of the form CloudFormation gives them (a secret's Ref is its full
// ARN, with the six random characters), so that what a policy names can
// be compared with what a function reads.
type stack struct {
	t          *testing.T
	tmpl       map[string]any
	params     map[string]string
	conditions map[string]bool
}

const (
	account = "123456789012"
	region  = "eu-west-3"
	apiID   = "a1b2c3d4e5"
	stackNm = "shop"
)

var rawTemplate map[string]any

// translatedTemplate is template.yaml after the SAM transform, as JSON.
func translatedTemplate(t *testing.T) map[string]any {
	t.Helper()
	if rawTemplate != nil {
		return rawTemplate
	}
	out, err := exec.Command("python3", "translate.py", filepath.Join(root, "template.yaml")).Output()
	if err != nil {
		t.Fatalf("aws-sam-translator: %v", err)
	}
	if err := json.Unmarshal(out, &rawTemplate); err != nil {
		t.Fatal(err)
	}
	return rawTemplate
}

// newStack evaluates the template with the parameters' defaults, then
// set (name, value, name, value...).
func newStack(t *testing.T, set ...string) *stack {
	t.Helper()
	s := &stack{t: t, tmpl: translatedTemplate(t), params: map[string]string{}, conditions: map[string]bool{}}
	for name, p := range s.tmpl["Parameters"].(map[string]any) {
		def, ok := p.(map[string]any)["Default"]
		if ok {
			s.params[name] = scalar(def)
		}
	}
	// the parameters without a default
	s.params["VpcId"], s.params["SubnetIds"], s.params["SenderEmail"] = "vpc-0a1b2c3d", "subnet-0a,subnet-0b", "no-reply@shop.example"
	for i := 0; i+1 < len(set); i += 2 {
		s.params[set[i]] = set[i+1]
	}
	if refused := s.refusals(); len(refused) > 0 {
		t.Fatalf("CloudFormation would refuse the stack: %s", strings.Join(refused, "; "))
	}
	for name := range s.tmpl["Conditions"].(map[string]any) {
		s.condition(name)
	}
	return s
}

// newStackOrRefusals is newStack for a parameter set CloudFormation may
// refuse: the stack, or what refuses it.
func newStackOrRefusals(t *testing.T, set ...string) (*stack, []string) {
	t.Helper()
	s := &stack{t: t, tmpl: translatedTemplate(t), params: map[string]string{}, conditions: map[string]bool{}}
	for name, p := range s.tmpl["Parameters"].(map[string]any) {
		if def, ok := p.(map[string]any)["Default"]; ok {
			s.params[name] = scalar(def)
		}
	}
	s.params["VpcId"], s.params["SubnetIds"], s.params["SenderEmail"] = "vpc-0a1b2c3d", "subnet-0a,subnet-0b", "no-reply@shop.example"
	for i := 0; i+1 < len(set); i += 2 {
		s.params[set[i]] = set[i+1]
	}
	if refused := s.refusals(); len(refused) > 0 {
		return nil, refused
	}
	for name := range s.tmpl["Conditions"].(map[string]any) {
		s.condition(name)
	}
	return s, nil
}

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case []any:
		var parts []string
		for _, e := range x {
			parts = append(parts, scalar(e))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

func (s *stack) condition(name string) bool {
	if v, ok := s.conditions[name]; ok {
		return v
	}
	def := s.tmpl["Conditions"].(map[string]any)[name]
	v := s.truth(def)
	s.conditions[name] = v
	return v
}

func (s *stack) truth(e any) bool {
	m, ok := e.(map[string]any)
	if !ok {
		s.t.Fatalf("not a condition: %v", e)
	}
	for fn, arg := range m {
		a, _ := arg.([]any)
		switch fn {
		case "Fn::Equals":
			return scalar(s.eval(a[0])) == scalar(s.eval(a[1]))
		case "Fn::Not":
			return !s.truth(a[0])
		case "Fn::And":
			for _, x := range a {
				if !s.truth(x) {
					return false
				}
			}
			return true
		case "Fn::Or":
			for _, x := range a {
				if s.truth(x) {
					return true
				}
			}
			return false
		case "Condition":
			return s.condition(arg.(string))
		}
	}
	s.t.Fatalf("unknown condition %v", e)
	return false
}

// noValue stands for AWS::NoValue: the property or element is left out.
type noValue struct{}

// eval resolves the intrinsics in e.
func (s *stack) eval(e any) any {
	switch x := e.(type) {
	case []any:
		var out []any
		for _, v := range x {
			if r := s.eval(v); r != (noValue{}) {
				out = append(out, r)
			}
		}
		return out
	case map[string]any:
		if len(x) == 1 {
			for fn, arg := range x {
				switch fn {
				case "Ref":
					return s.ref(arg.(string))
				case "Fn::Sub":
					return s.sub(arg)
				case "Fn::If":
					a := arg.([]any)
					if s.condition(a[0].(string)) {
						return s.eval(a[1])
					}
					return s.eval(a[2])
				case "Fn::Join":
					a := arg.([]any)
					var parts []string
					for _, p := range s.eval(a[1]).([]any) {
						parts = append(parts, scalar(p))
					}
					return strings.Join(parts, a[0].(string))
				case "Fn::Select":
					a := arg.([]any)
					i, _ := strconv.Atoi(scalar(s.eval(a[0])))
					list := s.eval(a[1]).([]any)
					return list[i]
				case "Fn::Split":
					a := arg.([]any)
					var out []any
					for _, p := range strings.Split(scalar(s.eval(a[1])), a[0].(string)) {
						out = append(out, p)
					}
					return out
				case "Fn::GetAtt":
					return s.getAtt(arg)
				}
			}
		}
		out := map[string]any{}
		for k, v := range x {
			if r := s.eval(v); r != (noValue{}) {
				out[k] = r
			}
		}
		return out
	}
	return e
}

func (s *stack) ref(name string) any {
	switch name {
	case "AWS::NoValue":
		return noValue{}
	case "AWS::Partition":
		return "aws"
	case "AWS::Region":
		return region
	case "AWS::AccountId":
		return account
	case "AWS::StackName":
		if n, ok := s.params["AWS::StackName"]; ok {
			return n
		}
		return stackNm
	case "AWS::URLSuffix":
		return "amazonaws.com"
	case "AWS::StackId":
		return "arn:aws:cloudformation:" + region + ":" + account + ":stack/" + scalar(s.ref("AWS::StackName")) + "/0f1e2d3c-aaaa-bbbb-cccc-0123456789ab"
	}
	if v, ok := s.params[name]; ok {
		if p, _ := s.tmpl["Parameters"].(map[string]any)[name].(map[string]any); strings.HasPrefix(scalar(p["Type"]), "List<") || p["Type"] == "CommaDelimitedList" {
			var out []any
			if v != "" {
				for _, e := range strings.Split(v, ",") {
					out = append(out, e)
				}
			}
			return out
		}
		return v
	}
	r, ok := s.tmpl["Resources"].(map[string]any)[name].(map[string]any)
	if !ok {
		s.t.Fatalf("Ref %s: no such parameter or resource", name)
	}
	switch r["Type"] {
	case "AWS::SecretsManager::Secret":
		return "arn:aws:secretsmanager:" + region + ":" + account + ":secret:" + name + "-Ab12Cd"
	case "AWS::ApiGatewayV2::Api":
		return apiID
	case "AWS::IAM::ManagedPolicy":
		return "arn:aws:iam::" + account + ":policy/" + stackNm + "-" + name
	}
	return "ref-" + name
}

var subVar = regexp.MustCompile(`\$\{([^}!]+)\}`)

func (s *stack) sub(arg any) string {
	str, vars := "", map[string]any{}
	switch a := arg.(type) {
	case string:
		str = a
	case []any:
		str = a[0].(string)
		for k, v := range a[1].(map[string]any) {
			vars[k] = s.eval(v)
		}
	}
	return subVar.ReplaceAllStringFunc(str, func(m string) string {
		name := m[2 : len(m)-1]
		if v, ok := vars[name]; ok {
			return scalar(v)
		}
		if strings.Contains(name, ".") {
			return "getatt-" + name
		}
		return scalar(s.ref(name))
	})
}

// getAtt is a resource attribute: a KMS key's Arn as KMS formats it (the
// policies name it), anything else a placeholder.
func (s *stack) getAtt(arg any) string {
	var res, attr string
	switch a := arg.(type) {
	case string:
		res, attr, _ = strings.Cut(a, ".")
	case []any:
		res, attr = scalar(a[0]), scalar(a[1])
	}
	if r, ok := s.tmpl["Resources"].(map[string]any)[res].(map[string]any); ok && r["Type"] == "AWS::KMS::Key" && attr == "Arn" {
		return "arn:aws:kms:" + region + ":" + account + ":key/00000000-0000-4000-8000-" + fmt.Sprintf("%012x", len(res))
	}
	if r, ok := s.tmpl["Resources"].(map[string]any)[res].(map[string]any); ok && r["Type"] == "AWS::SQS::Queue" {
		// CloudFormation names a queue <stack>-<logical id>-<suffix>
		name := "shop-" + res + "-AbCdEf123456"
		switch attr {
		case "Arn":
			return "arn:aws:sqs:" + region + ":" + account + ":" + name
		case "QueueName":
			return name
		}
	}
	return "getatt-" + scalar(arg)
}

// resource is an evaluated resource of the stack; nil when its condition
// is false.
func (s *stack) resource(name string) map[string]any {
	r := s.tmpl["Resources"].(map[string]any)[name].(map[string]any)
	if c, ok := r["Condition"].(string); ok && !s.condition(c) {
		return nil
	}
	return s.eval(r).(map[string]any)
}

// statement is an allowed or denied IAM statement, evaluated.
type statement struct {
	Effect    string
	Actions   []string
	Resources []string
	Condition map[string]any
}

// statements returns the IAM statements of a role or policy resource.
func (s *stack) statements(name string) []statement {
	r := s.resource(name)
	if r == nil {
		return nil
	}
	props := r["Properties"].(map[string]any)
	var docs []any
	if pd, ok := props["PolicyDocument"]; ok {
		docs = append(docs, pd)
	}
	if ps, ok := props["Policies"].([]any); ok {
		for _, p := range ps {
			docs = append(docs, p.(map[string]any)["PolicyDocument"])
		}
	}
	var out []statement
	for _, d := range docs {
		sts, _ := d.(map[string]any)["Statement"].([]any)
		for _, st := range sts {
			m := st.(map[string]any)
			x := statement{Effect: scalar(m["Effect"]), Actions: anyStrings(m["Action"]), Resources: anyStrings(m["Resource"])}
			x.Condition, _ = m["Condition"].(map[string]any)
			out = append(out, x)
		}
	}
	return out
}

// env is the evaluated environment of a function resource.
func (s *stack) env(fn string) map[string]string {
	r := s.resource(fn)
	out := map[string]string{}
	vars, _ := r["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
	for k, v := range vars {
		out[k] = scalar(v)
	}
	return out
}

// allows reports whether the role's allow statements grant action on arn
// (IAM wildcards * and ?).
func allows(sts []statement, action, arn string) bool {
	for _, st := range sts {
		if st.Effect != "Allow" || !slices.Contains(st.Actions, action) {
			continue
		}
		for _, r := range st.Resources {
			if wildcard(r).MatchString(arn) {
				return true
			}
		}
	}
	return false
}

func wildcard(pattern string) *regexp.Regexp {
	q := regexp.QuoteMeta(pattern)
	q = strings.ReplaceAll(q, `\*`, `.*`)
	q = strings.ReplaceAll(q, `\?`, `.`)
	return regexp.MustCompile("^" + q + "$")
}
