// Package deploy checks template.yaml against the code: functions,
// Makefile targets, routes, environment and IAM policies.
package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation/serverless"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/internal/lambdaapp"
)

const root = "../.."

// loggingConfig matches a function's LoggingConfig block.
var loggingConfig = regexp.MustCompile(`(?m)^      LoggingConfig:\n(        .*\n)+`)

// newerProperties matches the resource properties goformation does not know.
var newerProperties = regexp.MustCompile(`(?m)^      (LoggingConfig|AccessLogSettings|RouteSettings|DefaultRouteSettings|Auth):.*\n(        .*\n)*`)

// actionsOf maps the AWS SDK service packages a function links to the IAM
// actions its code calls through them.
var actionsOf = map[string][]string{
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager": {"secretsmanager:GetSecretValue"},
	"github.com/aws/aws-sdk-go-v2/service/ssm":            {"ssm:GetParameter"},
	"github.com/aws/aws-sdk-go-v2/service/sesv2":          {"ses:SendEmail"},
	"github.com/aws/aws-sdk-go-v2/service/sns":            {"sns:Publish"},
	"github.com/aws/aws-sdk-go-v2/service/kms":            {"kms:Decrypt"},
	"github.com/aws/aws-sdk-go-v2/service/eventbridge":    {"events:PutEvents"},
	"github.com/otpguard/otpguard/internal/eventbus":      {"events:PutEvents"},
	"github.com/otpguard/otpguard/internal/triggers":      {"kms:Decrypt"},
	// The lean signed calls: lambdaapp's JSON 1.1 reads (internal/awsjson),
	// the send function's SES SendEmail and SNS Publish.
	"github.com/otpguard/otpguard/internal/delivery":  {"ses:SendEmail", "sns:Publish"},
	"github.com/otpguard/otpguard/internal/lambdaapp": {"secretsmanager:GetSecretValue", "ssm:GetParameter"},
}

type function struct {
	name string
	res  *serverless.Function
	dir  string // functions/<dir>
}

func load(t *testing.T) (map[string]*serverless.Function, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// goformation's types predate some properties (a function's
	// LoggingConfig, an HttpApi's AccessLogSettings): checked apart
	// (TestEveryFunctionLogsToItsOwnGroup, TestTheAPIDefendsItself), cut
	// out here.
	raw = newerProperties.ReplaceAll(raw, nil)
	tmpl, err := goformation.ParseYAML(raw)
	if err != nil {
		t.Fatalf("goformation cannot parse template.yaml: %v", err)
	}
	var globals map[string]any
	b, _ := json.Marshal(tmpl.Globals["Function"])
	_ = json.Unmarshal(b, &globals)
	return tmpl.GetAllServerlessFunctionResources(), globals
}

// makeTarget returns what `make -n build-<id>` would run.
func makeTarget(t *testing.T, id string) string {
	t.Helper()
	cmd := exec.Command("make", "-n", "--no-print-directory", "build-"+id, "ARTIFACTS_DIR=/artifacts")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("Makefile has no build-%s target (what sam build runs): %v\n%s", id, err, out)
	}
	return string(out)
}

func functions(t *testing.T) []function {
	fns, _ := load(t)
	var out []function
	for name, f := range fns {
		recipe := makeTarget(t, name)
		i := strings.Index(recipe, "./functions/")
		if i < 0 {
			t.Fatalf("build-%s does not build a ./functions/ folder: %s", name, recipe)
		}
		dir := strings.Fields(recipe[i+len("./functions/"):])[0]
		out = append(out, function{name, f, dir})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	if len(out) == 0 {
		t.Fatal("no functions in template.yaml")
	}
	return out
}

func TestEveryFunctionHasAFolderAndAMakefileTarget(t *testing.T) {
	_, globals := load(t)
	if globals["Runtime"] != "provided.al2023" || globals["Handler"] != "bootstrap" || !slices.Equal(anyStrings(globals["Architectures"]), []string{"arm64"}) {
		t.Errorf("Globals.Function: Runtime %v, Handler %v, Architectures %v; want provided.al2023, bootstrap, [arm64]", globals["Runtime"], globals["Handler"], globals["Architectures"])
	}
	seen := map[string]bool{}
	for _, f := range functions(t) {
		if f.res.AWSCloudFormationMetadata["BuildMethod"] != "makefile" {
			t.Errorf("%s: Metadata.BuildMethod is %v, want makefile", f.name, f.res.AWSCloudFormationMetadata["BuildMethod"])
		}
		if _, err := os.Stat(filepath.Join(root, "functions", f.dir, "main.go")); err != nil {
			t.Errorf("%s: %v", f.name, err)
		}
		recipe := makeTarget(t, f.name)
		for _, want := range []string{"-tags lambda.norpc", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64", "-s -w", "-o /artifacts/bootstrap"} {
			if !strings.Contains(recipe, want) {
				t.Errorf("build-%s lacks %q: %s", f.name, want, recipe)
			}
		}
		seen[f.dir] = true
	}
	dirs, _ := os.ReadDir(filepath.Join(root, "functions"))
	for _, d := range dirs {
		if !seen[d.Name()] {
			t.Errorf("functions/%s is in no template function", d.Name())
		}
	}
}

func TestEveryRouteMapsToOneFunction(t *testing.T) {
	routes := map[string]string{}
	for _, f := range functions(t) {
		fn, _ := lambdaFunction(f.dir)
		if (len(f.res.Events) == 0) != (fn.Trigger || fn.Queue) {
			t.Errorf("%s has %d events; a trigger has none (Cognito invokes it), nor the deliver function (its event source mapping is a resource of its own), a route's function one or more", f.name, len(f.res.Events))
		}
		for name, e := range f.res.Events {
			var p struct{ Method, Path, ApiId any }
			b, _ := json.Marshal(e.Properties)
			_ = json.Unmarshal(b, &p)
			if e.Type != "HttpApi" {
				t.Errorf("%s event %s: type %s, want HttpApi", f.name, name, e.Type)
			}
			route := strings.ToUpper(p.Method.(string)) + " " + p.Path.(string)
			if other, dup := routes[route]; dup {
				t.Errorf("%s is mapped to %s and %s", route, other, f.name)
			}
			routes[route] = f.name
		}
	}
	for _, rt := range api.Routes() {
		r := rt.Method + " " + rt.Path
		if routes[r] == "" {
			t.Errorf("the API serves %s but no function is mapped to it", r)
		}
		delete(routes, r)
	}
	for r, fn := range routes {
		t.Errorf("%s maps %s, which the API does not serve", fn, r)
	}
}

// TestEveryEnvVarAFunctionReadsIsSet: the template sets exactly the
// variables each function reads (lambdaapp.Vars), the Globals' included.
func TestEveryEnvVarAFunctionReadsIsSet(t *testing.T) {
	_, globals := load(t)
	genv := map[string]bool{}
	if env, ok := globals["Environment"].(map[string]any); ok {
		for k := range env["Variables"].(map[string]any) {
			genv[k] = true
		}
	}
	for _, f := range functions(t) {
		fn, ok := lambdaFunction(f.dir)
		if !ok {
			t.Errorf("functions/%s is not one of lambdaapp.Functions", f.dir)
			continue
		}
		set := map[string]bool{}
		for k := range genv {
			set[k] = true
		}
		if f.res.Environment != nil {
			for k := range f.res.Environment.Variables {
				set[k] = true
			}
		}
		for _, v := range lambdaapp.Vars(fn) {
			if !set[v] {
				t.Errorf("%s reads %s, which the template does not set", f.name, v)
			}
			delete(set, v)
		}
		// and sets nothing else: a variable no code reads is a setting
		// that does nothing
		for v := range set {
			t.Errorf("%s: the template sets %s, which the function never reads (lambdaapp.Vars)", f.name, v)
		}
	}
}

func TestPoliciesNameOnlyTheActionsTheFunctionUses(t *testing.T) {
	// Under the parameters that grant the most (every optional secret
	// and key given), the actions each role may take are the ones its
	// code calls: kms:Decrypt only as Secrets Manager's, for a secret
	// under a customer-managed key (the condition is checked by
	// TestPolicyARNsNameWhatTheFunctionsRead).
	s := newStack(t, "CreateCache", "false", "ExistingRedisUrl", "rediss://u@h:6379", "ExistingRedisPasswordSecretArn", fullSecret,
		"CognitoClientSecretArn", cognitoSecret, "SecretsKmsKeyArn", kmsKey)
	for _, f := range functions(t) {
		out, err := goList(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		deps := strings.Fields(string(out))
		fn, _ := lambdaFunction(f.dir)
		var want []string
		for pkg, action := range actionsOf {
			if slices.Contains(deps, pkg) {
				want = append(want, action...)
			}
		}
		if fn.Signs {
			want = append(want, "secretsmanager:DescribeSecret")
		}
		// internal/delivery's SQS client: the functions that queue send
		// and read the depth; the deliver function postpones, and its
		// event source mapping receives, deletes and reads with its role
		switch {
		case fn.Queue:
			want = append(want, "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility")
		case slices.Contains(deps, "github.com/otpguard/otpguard/internal/delivery"):
			want = append(want, "sqs:SendMessage", "sqs:GetQueueAttributes")
		}
		want = append(want, "kms:Decrypt")
		if slices.Contains(deps, "github.com/otpguard/otpguard/guard/outbox") {
			t.Errorf("%s links the local outbox; it must never be in a Lambda build", f.name)
		}
		var got []string
		for _, st := range s.statements(f.name + "Role") {
			if st.Effect == "Allow" {
				got = append(got, st.Actions...)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		want, got = slices.Compact(want), slices.Compact(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the policy allows %v; the code calls %v", f.name, got, want)
		}
	}
}

func anyStrings(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// lambdaFunction finds the lambdaapp.Function a folder's main.go runs.
func lambdaFunction(dir string) (lambdaapp.Function, bool) {
	src, err := os.ReadFile(filepath.Join(root, "functions", dir, "main.go"))
	if err != nil {
		return lambdaapp.Function{}, false
	}
	for _, fn := range lambdaapp.Functions {
		if fn.Name == dir && strings.Contains(string(src), "lambdaapp.Main(lambdaapp."+strings.ToUpper(dir[:1])+dir[1:]+",") {
			return fn, true
		}
	}
	return lambdaapp.Function{}, false
}

func TestEveryFunctionLogsToItsOwnGroup(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := loggingConfig.FindAll(raw, -1)
	groups := map[string]bool{}
	for _, b := range blocks {
		m := regexp.MustCompile(`LogGroup: !Ref (\w+)`).FindSubmatch(b)
		if m == nil {
			t.Errorf("a LoggingConfig without LogGroup: !Ref: %s", b)
			continue
		}
		groups[string(m[1])] = true
	}
	fns := functions(t)
	if len(blocks) != len(fns) || len(groups) != len(fns) {
		t.Errorf("%d functions, %d LoggingConfig blocks, %d distinct log groups: each function needs its own", len(fns), len(blocks), len(groups))
	}
	for g := range groups {
		if !regexp.MustCompile(`(?m)^  ` + g + `:\n    Type: AWS::Logs::LogGroup\n`).Match(raw) {
			t.Errorf("LogGroup %s is not an AWS::Logs::LogGroup of the template", g)
		}
	}
}
