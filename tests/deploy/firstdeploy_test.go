package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The first `sam deploy` in a real account: what cfn-lint and
// the SAM translator accept, and AWS then refuses.

// nameLimits are the names the stack derives from its own name, with the
// limits their services set (the resource types' references).
var nameLimits = []struct {
	resource, path string
	max            int
	pattern        *regexp.Regexp
}{
	// ElastiCache: 1-40 characters, a letter first, letters, digits and
	// single hyphens, no hyphen last
	{"Cache", "ServerlessCacheName", 40, regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)},
	{"CacheUser", "UserId", 40, regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*$`)},
	{"CacheDefaultUser", "UserId", 40, regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*$`)},
	{"CacheUserGroup", "UserGroupId", 40, regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*$`)},
	// Cognito: 1-128
	{"UserPool", "UserPoolName", 128, regexp.MustCompile(`^[\w\s+=,.@-]+$`)},
	// WAFv2: names 1-128, metric names 1-255
	{"UserPoolWebAcl", "Name", 128, regexp.MustCompile(`^[\w-]+$`)},
	{"UserPoolWebAcl", "VisibilityConfig.MetricName", 255, regexp.MustCompile(`^[\w#:.\-/]+$`)},
	{"UserPoolWafExempt", "Name", 128, regexp.MustCompile(`^[\w-]+$`)},
	// CloudWatch: dashboard names 1-255 of letters, digits, - and _;
	// alarm names 1-255; log group names 1-512
	{"Dashboard", "DashboardName", 255, regexp.MustCompile(`^[A-Za-z0-9_-]+$`)},
	{"DeniedSendsAlarm", "AlarmName", 255, nil},
	{"FunctionErrorsAlarm", "AlarmName", 255, nil},
	{"TriggerSenderErrorsAlarm", "AlarmName", 255, nil},
	{"DeliveryQueueAgeAlarm", "AlarmName", 255, nil},
	{"DeliveryDeadLetterAlarm", "AlarmName", 255, nil},
	{"CognitoAuthLogs", "LogGroupName", 512, nil},
	{"DeliverLogs", "LogGroupName", 512, nil},
}

// TestAnyStackNameGivesValidNames: a stack name of 40 characters (the
// cache's name was "<stack>-otpguard", 1-40 characters: CREATE_FAILED
// from 32 on) and of 128, CloudFormation's longest, give every named
// resource a name its service takes.
func TestAnyStackNameGivesValidNames(t *testing.T) {
	for _, name := range []string{"shop", "Shop-Prod-Eu-West-3-Otpguard-Blue-Green2", strings.Repeat("Ab1-", 31) + "Abcd"} {
		s := newStack(t, "AWS::StackName", name, "UserPoolWafRateLimit", "300", "WafExemptCidrs", "203.0.113.7/32")
		for _, n := range nameLimits {
			if _, ok := s.tmpl["Resources"].(map[string]any)[n.resource]; !ok {
				t.Errorf("%s is not in the template", n.resource)
				continue
			}
			r := s.resource(n.resource)
			if r == nil {
				t.Fatalf("%s is not in the stack", n.resource)
			}
			var v any = r["Properties"]
			for _, k := range strings.Split(n.path, ".") {
				v = v.(map[string]any)[k]
			}
			got := scalar(v)
			if len(got) < 1 || len(got) > n.max || (n.pattern != nil && !n.pattern.MatchString(got)) {
				t.Errorf("stack %q (%d characters): %s.%s is %q (%d characters), want 1-%d matching %v",
					name, len(name), n.resource, n.path, got, len(got), n.max, n.pattern)
			}
		}
	}
}

// TestTheWafLimitIsOneWAFTakes: WAFv2's RateBasedStatement Limit is 10 to
// 2,000,000,000 (it was 100 until 2024); the parameter refuses anything
// else but 0 (no web ACL) before anything is created.
func TestTheWafLimitIsOneWAFTakes(t *testing.T) {
	exempt := []string{"WafExemptCidrs", "203.0.113.7/32"}
	for v, ok := range map[string]bool{"0": true, "10": true, "300": true, "2000000000": true,
		"5": false, "9": false, "-1": false, "07": false, "2000000001": false, "1e3": false, "": false} {
		_, refused := newStackOrRefusals(t, append([]string{"UserPoolWafRateLimit", v}, exempt...)...)
		byParameter := strings.Contains(strings.Join(refused, ";"), "UserPoolWafRateLimit:")
		if byParameter == ok {
			t.Errorf("UserPoolWafRateLimit=%q: refused by its constraints %v, want %v (%v)", v, byParameter, !ok, refused)
		}
	}
}

// TestTheWafRuleNeverCountsTheStacksOwnEgress: with AuthMode cognito the
// login and signup functions call the pool from the VPC's NAT addresses;
// a per-address WAF rule would count every user's sign-in against those
// few addresses and block the stack's own calls. The combination is
// refused without WafExemptCidrs, and with them the rule never counts
// those addresses (a scope-down NOT on an IP set of exactly them).
func TestTheWafRuleNeverCountsTheStacksOwnEgress(t *testing.T) {
	if _, refused := newStackOrRefusals(t, "UserPoolWafRateLimit", "300"); !strings.Contains(strings.Join(refused, ";"), "PoolWafExemptsTheStack") {
		t.Errorf("a WAF limit without the stack's egress exempt: refused for %v, want the rule PoolWafExemptsTheStack", refused)
	}
	if _, refused := newStackOrRefusals(t, "UserPoolWafRateLimit", "300", "AuthMode", "http", "AuthUpstreamUrl", "https://shop.example"); len(refused) > 0 {
		t.Errorf("AuthMode http (no pool, no web ACL) refused: %v", refused)
	}
	s := newStack(t, "UserPoolWafRateLimit", "300", "WafExemptCidrs", "203.0.113.7/32,198.51.100.0/28")
	ipset := s.resource("UserPoolWafExempt")
	if ipset == nil {
		t.Fatal("no IP set")
	}
	if got := scalar(ipset["Properties"].(map[string]any)["Addresses"]); got != "203.0.113.7/32,198.51.100.0/28" {
		t.Errorf("the IP set holds %s", got)
	}
	rules := s.resource("UserPoolWebAcl")["Properties"].(map[string]any)["Rules"].([]any)
	for _, r := range rules {
		rb, _ := r.(map[string]any)["Statement"].(map[string]any)["RateBasedStatement"].(map[string]any)
		if rb == nil {
			continue
		}
		b, _ := json.Marshal(rb["ScopeDownStatement"])
		if !strings.Contains(string(b), `{"NotStatement":{"Statement":{"IPSetReferenceStatement":{"Arn":"getatt-UserPoolWafExempt,Arn"}}}}`) &&
			!strings.Contains(string(b), `{"NotStatement":{"Statement":{"IPSetReferenceStatement":{"Arn":"getatt-UserPoolWafExempt.Arn"}}}}`) {
			t.Errorf("the rate rule counts every address: scope-down %s", b)
		}
		if scalar(rb["Limit"]) != "300" {
			t.Errorf("limit %v", rb["Limit"])
		}
	}
	for _, bad := range []string{"203.0.113.7", "203.0.113.7/33", "2001:db8::/32", "203.0.113.7/32,"} {
		if _, refused := newStackOrRefusals(t, "UserPoolWafRateLimit", "300", "WafExemptCidrs", bad); len(refused) == 0 {
			t.Errorf("WafExemptCidrs=%q accepted (WAF would refuse the IP set)", bad)
		}
	}
}

// readme is the documentation's text: the README and every docs/ page.
func readme(t *testing.T) string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs/*.md: %v", err)
	}
	var all strings.Builder
	for _, p := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		all.WriteString("\n")
	}
	return all.String()
}

// TestTheDocumentedConfigCommandFitsTheDefaultConfig: the default config
// is over the Standard tier's 4 KB, so every documented put-parameter of
// the config names a tier that takes it (Intelligent-Tiering: Advanced
// when the value needs it), and the AWS CLI's own service model knows
// that tier.
func TestTheDocumentedConfigCommandFitsTheDefaultConfig(t *testing.T) {
	def, err := os.ReadFile(filepath.Join(root, "config", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(def) <= 4096 || len(def) > 8192 {
		t.Fatalf("config/default.yaml is %d bytes: this test is about a document between the Standard (4 KB) and Advanced (8 KB) limits", len(def))
	}
	cmds := regexp.MustCompile(`(?m)^\s*aws ssm put-parameter[^\n]*`).FindAllString(readme(t), -1)
	if len(cmds) == 0 {
		t.Fatal("the README documents no aws ssm put-parameter")
	}
	for _, c := range cmds {
		f := strings.Fields(c)
		params := map[string]any{"Name": "/shop/otpguard/config", "Value": string(def), "Overwrite": true}
		for i, a := range f {
			if i+1 < len(f) {
				switch a {
				case "--type":
					params["Type"] = f[i+1]
				case "--tier":
					params["Tier"] = f[i+1]
				}
			}
		}
		if params["Tier"] != "Intelligent-Tiering" && params["Tier"] != "Advanced" {
			t.Errorf("%q: no --tier Intelligent-Tiering (without it the Standard tier refuses the %d-byte default config)", c, len(def))
		}
		validate(t, "ssm", "PutParameter", params)
	}
}

// validate checks params against the AWS service model of the AWS CLI
// (botocore's: unknown members, types, enums, lengths).
func validate(t *testing.T, service, operation string, params any) {
	t.Helper()
	b, _ := json.Marshal(params)
	f := filepath.Join(t.TempDir(), "params.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("python3", "validate.py", service, operation, f).CombinedOutput()
	if err != nil {
		t.Errorf("%s %s refuses %s:\n%s (%v)", service, operation, b, out, err)
	}
}

// awsShim stands in for the AWS CLI in the README's procedure: it answers
// describe-stacks and describe-user-pool from test data and checks what
// update-user-pool is given against the CLI's service model, as the
// service would take it (UnusedAccountValidityDays is refused: "Please use
// TemporaryPasswordValidityDays in PasswordPolicy instead").
const awsShim = `#!/usr/bin/env bash
set -euo pipefail
args="$*"
case "$args" in
  cloudformation\ describe-stacks*)
    case "$args" in
      *CognitoSendFunctionArn*) echo arn:aws:lambda:eu-west-3:123456789012:function:shop-CognitoSendFunction-AbC ;;
      *CognitoAuthFunctionArn*) echo arn:aws:lambda:eu-west-3:123456789012:function:shop-CognitoAuthFunction-DeF ;;
      *TriggerKeyArn*) echo arn:aws:kms:eu-west-3:123456789012:key/0b1e6c3e-5a1f-4c0e-9d7a-8a1d2f3e4b5c ;;
      *) echo "shim: unknown output in $args" >&2; exit 2 ;;
    esac ;;
  cognito-idp\ describe-user-pool*--query\ UserPool.LambdaConfig*)
    jq .LambdaConfig "$SHIM_DIR/applied.json" ;;
  cognito-idp\ describe-user-pool*--query\ UserPool*)
    jq .UserPool "$SHIM_DIR/describe-user-pool.json" ;;
  cognito-idp\ update-user-pool\ --cli-input-json\ file://*)
    f="${args##*file://}"
    python3 "$SHIM_DIR/validate.py" cognito-idp UpdateUserPool "$f"
    if jq -e '.AdminCreateUserConfig.UnusedAccountValidityDays != null' "$f" >/dev/null; then
      echo "An error occurred (InvalidParameterException) when calling the UpdateUserPool operation: Please use TemporaryPasswordValidityDays in PasswordPolicy instead of UnusedAccountValidityDays" >&2
      exit 254
    fi
    cp "$f" "$SHIM_DIR/applied.json" ;;
  *) echo "shim: unexpected aws $args" >&2; exit 2 ;;
esac
`

// TestTheDocumentedPoolUpdateIsOneCognitoTakes runs the README's
// procedure for attaching the triggers to an existing pool, as written,
// against a describe-user-pool answer of the CLI's form: what it passes
// to update-user-pool is what the service model takes, without the
// deprecated member the service refuses, every setting it read kept, and
// otpguard's triggers merged beside the pool's own.
func TestTheDocumentedPoolUpdateIsOneCognitoTakes(t *testing.T) {
	text := readme(t)
	i := strings.Index(text, "**Attach the triggers to an existing pool.**")
	if i < 0 {
		t.Fatal("the README has no procedure for an existing pool")
	}
	block := text[i:]
	start := strings.Index(block, "```sh\n")
	end := strings.Index(block[start+6:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no sh block in the procedure")
	}
	script := block[start+6 : start+6+end]
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	_ = os.Mkdir(bin, 0o755)
	if err := os.WriteFile(filepath.Join(bin, "aws"), []byte(awsShim), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"validate.py", "testdata/describe-user-pool.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatal("jq is needed (apt-get install jq): the procedure uses it")
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "SHIM_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's procedure fails: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "applied.json"))
	if err != nil {
		t.Fatal("update-user-pool was never called")
	}
	var applied map[string]any
	_ = json.Unmarshal(b, &applied)
	lc, _ := applied["LambdaConfig"].(map[string]any)
	for _, k := range []string{"PreSignUp", "PreAuthentication", "PostAuthentication", "PostConfirmation", "KMSKeyID", "CustomSMSSender", "CustomEmailSender", "PreTokenGeneration"} {
		if lc[k] == nil {
			t.Errorf("the applied LambdaConfig lacks %s: %v", k, lc)
		}
	}
	for _, k := range []string{"MfaConfiguration", "EmailConfiguration", "SmsConfiguration", "UserPoolTier", "DeletionProtection", "VerificationMessageTemplate", "AdminCreateUserConfig"} {
		if applied[k] == nil {
			t.Errorf("the update resets %s (not passed back)", k)
		}
	}
}

// TestCORSOriginsAreOnesAPIGatewayTakes: the API allows credentials (the
// device cookie), and API Gateway refuses "*" with them at deploy time;
// the parameter refuses it first, and anything but origins.
func TestCORSOriginsAreOnesAPIGatewayTakes(t *testing.T) {
	for v, ok := range map[string]bool{"": true, "https://app.example.com": true, "https://app.example.com,http://localhost:3000": true,
		"*": false, "https://*.example.com": false, "https://app.example.com/": false, "app.example.com": false, "https://a.example.com, https://b.example.com": false} {
		_, refused := newStackOrRefusals(t, "AllowedOrigins", v)
		if got := len(refused) == 0; got != ok {
			t.Errorf("AllowedOrigins=%q: accepted %v, want %v (%v)", v, got, ok, refused)
		}
	}
}

// TestTheSendCapCoversEverySender: SendReservedConcurrency caps the
// provider spend, and the Cognito custom sender spends too.
func TestTheSendCapCoversEverySender(t *testing.T) {
	s := newStack(t, "SendReservedConcurrency", "20", "ReservedConcurrency", "50")
	for fn, want := range map[string]string{"SendFunction": "20", "CognitoSendFunction": "20", "LoginFunction": "50", "CognitoAuthFunction": "50"} {
		if got := scalar(s.resource(fn)["Properties"].(map[string]any)["ReservedConcurrentExecutions"]); got != want {
			t.Errorf("%s: reserved concurrency %s, want %s", fn, got, want)
		}
	}
}
