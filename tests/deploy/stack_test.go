package deploy

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard/api"
)

// translated is template.yaml after the AWS::Serverless transform (run by
// aws-sam-translator, as CloudFormation runs it): the resources that
// would be created.
type translated struct {
	Parameters map[string]struct {
		Type    string
		Default any
	}
	Rules     map[string]any
	Resources map[string]struct {
		Type                string
		Condition           string
		DeletionPolicy      string
		UpdateReplacePolicy string
		Properties          map[string]any
	}
}

func translate(t *testing.T) translated {
	t.Helper()
	cmd := exec.Command("python3", "translate.py", filepath.Join(root, "template.yaml"))
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("aws-sam-translator refuses template.yaml (pip install aws-sam-translator): %v\n%s", err, stderr)
	}
	var tr translated
	if err := json.Unmarshal(out, &tr); err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestCfnLintFindsNothing(t *testing.T) {
	out, err := exec.Command("cfn-lint", filepath.Join(root, "template.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("cfn-lint (pip install cfn-lint): %v\n%s", err, out)
	}
}

func TestInternalRoutesNeedIAMAndPublicOnesDoNot(t *testing.T) {
	tr := translate(t)
	body, _ := tr.Resources["Api"].Properties["Body"].(map[string]any)
	paths, _ := body["paths"].(map[string]any)
	for _, r := range api.Routes() {
		op, _ := paths[r.Path].(map[string]any)[strings.ToLower(r.Method)].(map[string]any)
		if op == nil {
			t.Errorf("%s %s is not in the API", r.Method, r.Path)
			continue
		}
		b, _ := json.Marshal(op["security"])
		iam := strings.Contains(string(b), "AWS_IAM")
		if iam != r.Internal {
			t.Errorf("%s %s: IAM authorizer %v, internal %v", r.Method, r.Path, iam, r.Internal)
		}
	}
}

func TestTheAPIDefendsItself(t *testing.T) {
	tr := translate(t)
	var stage map[string]any
	for _, r := range tr.Resources {
		if r.Type == "AWS::ApiGatewayV2::Stage" {
			stage = r.Properties
		}
	}
	if stage == nil {
		t.Fatal("no HTTP API stage")
	}
	if _, ok := stage["AccessLogSettings"].(map[string]any)["DestinationArn"]; !ok {
		t.Error("the stage has no access logs")
	}
	def := func(ref any) float64 {
		name, _ := ref.(map[string]any)["Ref"].(string)
		p, ok := tr.Parameters[name]
		if !ok {
			t.Errorf("throttling %v is not a parameter", ref)
			return 0
		}
		f, _ := strconv.ParseFloat(toString(p.Default), 64)
		return f
	}
	d, _ := stage["DefaultRouteSettings"].(map[string]any)
	send, _ := stage["RouteSettings"].(map[string]any)["POST /v1/otp/send"].(map[string]any)
	if d == nil || send == nil {
		t.Fatalf("stage throttling: default %v, send %v", d, send)
	}
	if !(def(send["ThrottlingRateLimit"]) < def(d["ThrottlingRateLimit"]) && def(send["ThrottlingBurstLimit"]) < def(d["ThrottlingBurstLimit"])) {
		t.Errorf("POST /v1/otp/send must be throttled lowest: %v vs %v", send, d)
	}
	body, _ := tr.Resources["Api"].Properties["Body"].(map[string]any)
	// The transform substitutes the parameter's value (here its default).
	if b, _ := json.Marshal(body["x-amazon-apigateway-cors"]); !strings.Contains(string(b), `{"Fn::If":["HasOrigins",`) || !strings.Contains(string(b), `"allowOrigins":{"Fn::Split":[",",`) {
		t.Errorf("CORS does not come from the AllowedOrigins parameter: %s", b)
	}
}

func TestResourcesAreHardened(t *testing.T) {
	tr := translate(t)
	if tr.Parameters["SubnetIds"].Type != "List<AWS::EC2::Subnet::Id>" || tr.Parameters["VpcId"].Type != "AWS::EC2::VPC::Id" {
		t.Errorf("untyped network parameters: %+v", tr.Parameters)
	}
	if tr.Rules["ExistingCacheNeedsUrl"] == nil {
		t.Error("no template rule refuses CreateCache=false without ExistingRedisUrl")
	}
	counts := map[string]int{}
	for name, r := range tr.Resources {
		counts[r.Type]++
		b, _ := json.Marshal(r.Properties)
		switch r.Type {
		case "AWS::SSM::Parameter":
			t.Errorf("%s: the stack must not own the config document (an update would reset it)", name)
		case "AWS::SecretsManager::Secret", "AWS::Cognito::UserPool":
			if r.DeletionPolicy != "Retain" || r.UpdateReplacePolicy != "Retain" {
				t.Errorf("%s: DeletionPolicy %q, UpdateReplacePolicy %q; want Retain", name, r.DeletionPolicy, r.UpdateReplacePolicy)
			}
		case "AWS::Lambda::Function":
			if r.Properties["ReservedConcurrentExecutions"] == nil {
				t.Errorf("%s has no reserved concurrency", name)
			}
			if !strings.Contains(string(b), `"LoggingConfig":{"LogFormat":"Text","LogGroup":{"Ref":`) {
				t.Errorf("%s does not log to a group of the stack", name)
			}
		case "AWS::ElastiCache::ServerlessCache":
			if !strings.Contains(string(b), `"ECPUPerSecond":{"Maximum":{"Ref":`) || !strings.Contains(string(b), `"DataStorage":{"Maximum":{"Ref":`) || r.Properties["UserGroupId"] == nil {
				t.Errorf("%s: no CacheUsageLimits or user group: %s", name, b)
			}
		case "AWS::IAM::Role":
			if strings.Contains(string(b), "ses:SendEmail") && !strings.Contains(string(b), `"ses:FromAddress":{"Ref":"SenderEmail"}`) {
				t.Errorf("%s may send email from any address", name)
			}
			if strings.Contains(string(b), "sns:Publish") && !strings.Contains(string(b), `{"Action":["sns:Publish"],"Effect":"Deny","Resource":{"Fn::Sub":"arn:${AWS::Partition}:sns:*:*:*"}}`) {
				t.Errorf("%s may publish to topics", name)
			}
		case "AWS::CloudWatch::Alarm":
			if strings.Contains(string(b), `"Namespace":"otpguard"`) && !strings.Contains(string(b), `{"Name":"Stack","Value":{"Ref":"AWS::StackName"}}`) {
				t.Errorf("%s: an otpguard metric alarm without the Stack dimension mixes stacks", name)
			}
		}
	}
	for typ, n := range map[string]int{"AWS::Lambda::Function": 10, "AWS::ElastiCache::UserGroup": 1, "AWS::EC2::SecurityGroup": 3, "AWS::EC2::VPCEndpoint": 7, "AWS::Logs::LogGroup": 11, "AWS::Lambda::Permission": 14, "AWS::KMS::Key": 1} {
		if counts[typ] != n {
			t.Errorf("%d %s, want %d", counts[typ], typ, n)
		}
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return ""
}

// TestTheTriggersAreWiredIntoThePool: the pool the stack creates calls
// the trigger functions (the custom senders as V1_0 with the stack's
// key), Cognito may invoke them for that pool only (or the existing pool
// named), encrypt with the key and never decrypt; the WAF web ACL exists
// only when asked for; CognitoTriggers false deploys none of it.
func TestTheTriggersAreWiredIntoThePool(t *testing.T) {
	s := newStack(t)
	lc, _ := s.resource("UserPool")["Properties"].(map[string]any)["LambdaConfig"].(map[string]any)
	key := s.getAtt("TriggerKey.Arn")
	if scalar(lc["KMSKeyID"]) != key {
		t.Errorf("the pool's KMSKeyID: %v, want %s", lc["KMSKeyID"], key)
	}
	for _, k := range []string{"CustomSMSSender", "CustomEmailSender"} {
		v, _ := lc[k].(map[string]any)
		if scalar(v["LambdaArn"]) != "getatt-CognitoSendFunction,Arn" || v["LambdaVersion"] != "V1_0" {
			t.Errorf("%s: %v", k, v)
		}
	}
	for _, k := range []string{"PreSignUp", "PreAuthentication", "PostAuthentication", "PostConfirmation"} {
		if scalar(lc[k]) != "getatt-CognitoAuthFunction,Arn" {
			t.Errorf("%s: %v", k, lc[k])
		}
	}
	for _, p := range []string{"CognitoSendPermission", "CognitoAuthPermission"} {
		props := s.resource(p)["Properties"].(map[string]any)
		if props["Principal"] != "cognito-idp.amazonaws.com" || scalar(props["SourceArn"]) != "getatt-UserPool,Arn" || props["Action"] != "lambda:InvokeFunction" {
			t.Errorf("%s: %v", p, props)
		}
	}
	policy, _ := json.Marshal(s.resource("TriggerKey")["Properties"].(map[string]any)["KeyPolicy"])
	for _, st := range s.resource("TriggerKey")["Properties"].(map[string]any)["KeyPolicy"].(map[string]any)["Statement"].([]any) {
		m := st.(map[string]any)
		if strings.Contains(fmt.Sprint(m["Principal"]), "cognito-idp") && (fmt.Sprint(m["Action"]) != "[kms:CreateGrant kms:Encrypt]" || m["Condition"] == nil) {
			t.Errorf("Cognito's grant on the key: %v", m)
		}
	}
	// Decrypt: the sender's role alone, for what Cognito encrypted for a
	// pool; the account administers the key without a decrypt right it
	// could delegate to any IAM policy allowing kms:Decrypt on "*"
	decrypters := 0
	for _, st := range s.resource("TriggerKey")["Properties"].(map[string]any)["KeyPolicy"].(map[string]any)["Statement"].([]any) {
		m := st.(map[string]any)
		actions := fmt.Sprint(m["Action"])
		if strings.Contains(actions, "kms:*") || strings.Contains(actions, "Decrypt") && m["Sid"] != "TheSenderDecryptsCodes" ||
			strings.Contains(actions, "ReEncrypt") || strings.Contains(actions, "GenerateDataKey") {
			t.Errorf("the key policy lets %v %s", m["Principal"], actions)
		}
		if m["Sid"] == "TheSenderDecryptsCodes" {
			decrypters++
			b, _ := json.Marshal(m["Condition"])
			if !strings.Contains(string(b), `"aws:PrincipalArn":"getatt-CognitoSendFunctionRole,Arn"`) && !strings.Contains(string(b), `"aws:PrincipalArn":"getatt-CognitoSendFunctionRole.Arn"`) ||
				!strings.Contains(string(b), `"kms:EncryptionContext:userpool-id":"false"`) {
				t.Errorf("the sender's decrypt right is not scoped to its role and to pools' codes: %s", b)
			}
		}
	}
	if decrypters != 1 || !strings.Contains(string(policy), "Decrypt") {
		t.Errorf("the key policy: %s", policy)
	}
	if s.resource("UserPoolWebAcl") != nil {
		t.Error("a web ACL without UserPoolWafRateLimit")
	}

	existing := newStack(t, "CreateUserPool", "false", "ExistingUserPoolId", region+"_AbCdEf", "ExistingUserPoolClientId", "1example23456789",
		"UserPoolWafRateLimit", "300", "WafExemptCidrs", "203.0.113.7/32")
	want := "arn:aws:cognito-idp:" + region + ":" + account + ":userpool/" + region + "_AbCdEf"
	for _, p := range []string{"CognitoSendPermission", "CognitoAuthPermission"} {
		if got := scalar(existing.resource(p)["Properties"].(map[string]any)["SourceArn"]); got != want {
			t.Errorf("%s with an existing pool: SourceArn %s, want %s", p, got, want)
		}
	}
	acl := existing.resource("UserPoolWebAcl")
	b, _ := json.Marshal(acl)
	if acl == nil || !strings.Contains(string(b), `"Limit":"300"`) && !strings.Contains(string(b), `"Limit":300`) {
		t.Errorf("the web ACL: %s", b)
	}
	if got := scalar(existing.resource("UserPoolWebAclAssociation")["Properties"].(map[string]any)["ResourceArn"]); got != want {
		t.Errorf("the web ACL is associated with %s, want %s", got, want)
	}

	off := newStack(t, "CognitoTriggers", "false")
	for _, r := range []string{"CognitoSendFunction", "CognitoAuthFunction", "TriggerKey", "CognitoSendPermission"} {
		if off.resource(r) != nil {
			t.Errorf("CognitoTriggers false deploys %s", r)
		}
	}
	if _, ok := off.resource("UserPool")["Properties"].(map[string]any)["LambdaConfig"]; ok {
		t.Error("CognitoTriggers false wires triggers into the pool")
	}
}
