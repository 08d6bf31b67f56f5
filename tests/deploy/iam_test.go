package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/internal/lambdaapp"
)

// The ARN formats of the resources the policies name.
var arnFormats = map[string]*regexp.Regexp{
	"secret":      regexp.MustCompile(`^arn:aws:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$`),
	"parameter":   regexp.MustCompile(`^arn:aws:ssm:[a-z0-9-]+:\d{12}:parameter/[A-Za-z0-9_.-][A-Za-z0-9_./-]*$`),
	"execute-api": regexp.MustCompile(`^arn:aws:execute-api:[a-z0-9-]+:\d{12}:[a-z0-9]+/\*/(GET|POST|DELETE)/v1/[a-z/*]+$`),
	"kms":         regexp.MustCompile(`^arn:aws:kms:[a-z0-9-]+:\d{12}:key/([A-Za-z0-9-]+|\*)$`), // key/* only with an alias condition
	"ses":         regexp.MustCompile(`^arn:aws:ses:[a-z0-9-]+:\d{12}:(identity|configuration-set)/\*$`),
	"sns":         regexp.MustCompile(`^arn:aws:sns:\*:\*:\*$|^\*$`),
	"sqs":         regexp.MustCompile(`^arn:aws:sqs:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]+$`),
	"events":      regexp.MustCompile(`^arn:aws:events:[a-z0-9-]+:\d{12}:event-bus/[A-Za-z0-9._-]+$`),
}

// parameterARN is the ARN SSM gives the parameter a function reads: for a
// fully qualified name (/a/b) the name follows "parameter" as it is.
func parameterARN(name string) string {
	if !strings.HasPrefix(name, "/") {
		name = "/" + name // what SSM does with a name without hierarchy
	}
	return "arn:aws:ssm:" + region + ":" + account + ":parameter" + name
}

var fullSecret = "arn:aws:secretsmanager:" + region + ":" + account + ":secret:prod/redis-password-Xy12Zw"
var cognitoSecret = "arn:aws:secretsmanager:" + region + ":" + account + ":secret:cognito-client-Qw34Er"
var kmsKey = "arn:aws:kms:" + region + ":" + account + ":key/1234abcd-12ab-34cd-56ef-1234567890ab"

// TestPolicyARNsNameWhatTheFunctionsRead: under each set of parameters a
// user may give, every ARN in an IAM policy has its resource's format,
// and each function's role allows exactly the reads its code makes of the
// names its environment gives it: the config parameter (the ARN SSM gives
// that name), the secrets it needs (and not the signing key, but for the
// functions that sign), the customer-managed key through Secrets Manager.
func TestPolicyARNsNameWhatTheFunctionsRead(t *testing.T) {
	sets := map[string][]string{
		"defaults": nil,
		"own config name, existing cache and secrets": {"ConfigParameterName", "/shop/prod/otpguard", "CreateCache", "false",
			"ExistingRedisUrl", "rediss://app@cache.example.internal:6379", "ExistingRedisPasswordSecretArn", fullSecret,
			"CreateUserPool", "false", "ExistingUserPoolId", region + "_AbCdEf", "ExistingUserPoolClientId", "1example23456789",
			"CognitoClientSecretArn", cognitoSecret, "SecretsKmsKeyArn", kmsKey, "BackendRoleName", "shop-backend"},
		"one-level config name": {"ConfigParameterName", "/otpguard"},
	}
	for name, set := range sets {
		t.Run(name, func(t *testing.T) {
			s := newStack(t, set...)
			for _, f := range functions(t) {
				fn, _ := lambdaFunction(f.dir)
				role := f.name + "Role"
				sts := s.statements(role)
				env := s.env(f.name)
				for _, st := range sts {
					for _, r := range st.Resources {
						if !knownFormat(r) {
							t.Errorf("%s: %s is no ARN of a resource the stack names", role, r)
						}
					}
				}
				// The config parameter it reads.
				if p := env["GUARD_CONFIG_PARAM"]; !allows(sts, "ssm:GetParameter", parameterARN(p)) {
					t.Errorf("%s reads the parameter %s, whose ARN %s its role does not allow", f.name, p, parameterARN(p))
				}
				// The secrets it reads, and only those.
				reads := map[string]bool{}
				for _, v := range []string{"GUARD_HASH_SECRET_ID", "GUARD_SIGNING_SECRET_ID", "REDIS_PASSWORD_SECRET_ID"} {
					if env[v] != "" {
						reads[env[v]] = true
						if !allows(sts, "secretsmanager:GetSecretValue", env[v]) {
							t.Errorf("%s reads the secret %s (%s), which its role does not allow", f.name, env[v], v)
						}
					}
				}
				signing := s.ref("SigningSecret").(string)
				if allows(sts, "secretsmanager:GetSecretValue", signing) != fn.Signs {
					t.Errorf("%s may read the signing key: %v; it signs: %v", f.name, !fn.Signs, fn.Signs)
				}
				if fn.Signs && !allows(sts, "secretsmanager:DescribeSecret", signing) {
					t.Errorf("%s reads the signing key's versions (DescribeSecret), which its role does not allow", f.name)
				}
				if allows(sts, "secretsmanager:GetSecretValue", s.ref("HashSecret").(string)) != fn.Hashes {
					t.Errorf("%s may read the key-hashing secret: %v; it hashes: %v", f.name, !fn.Hashes, fn.Hashes)
				}
				if fn.Auth && s.params["CognitoClientSecretArn"] != "" && !allows(sts, "secretsmanager:GetSecretValue", cognitoSecret) {
					t.Errorf("%s reads the Cognito client secret, which its role does not allow", f.name)
				}
				// The custom senders' codes: the trigger key, named by its
				// alias (the key's policy names the role: the role may not
				// name the key), for the function that decrypts them alone.
				alias := ""
				if a := s.resource("TriggerKeyAlias"); a != nil {
					alias = scalar(a["Properties"].(map[string]any)["AliasName"])
				}
				byAlias := func(st statement) bool {
					c, _ := st.Condition["ForAnyValue:StringEquals"].(map[string]any)
					return c != nil && scalar(c["kms:ResourceAliases"]) == alias && alias != ""
				}
				var direct []statement
				aliased := false
				for _, st := range sts {
					if slices.Contains(st.Actions, "kms:Decrypt") && byAlias(st) {
						aliased = true
						continue
					}
					direct = append(direct, st)
				}
				if aliased != fn.KMS {
					t.Errorf("%s: kms:Decrypt on the trigger key (by its alias %q) %v; it decrypts the codes: %v", f.name, alias, aliased, fn.KMS)
				}
				kms := allows(direct, "kms:Decrypt", kmsKey)
				if want := s.params["SecretsKmsKeyArn"] != ""; kms != want {
					t.Errorf("%s: kms:Decrypt on the customer-managed key %v, want %v", f.name, kms, want)
				}
				for _, st := range direct {
					if len(st.Actions) != 1 || st.Actions[0] != "kms:Decrypt" {
						continue
					}
					via, _ := st.Condition["StringEquals"].(map[string]any)
					if !strings.Contains(scalar(via["kms:ViaService"]), "secretsmanager."+region) {
						t.Errorf("%s may decrypt with the key outside Secrets Manager: %v", f.name, st.Condition)
					}
				}
			}
			// The internal routes' policy names exactly the internal routes.
			var arns []string
			for _, st := range s.statements("InternalRoutesPolicy") {
				arns = append(arns, st.Resources...)
			}
			for _, r := range api.Routes() {
				arn := "arn:aws:execute-api:" + region + ":" + account + ":" + apiID + "/prod/" + r.Method + regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllString(r.Path, "x")
				ok := false
				for _, a := range arns {
					ok = ok || wildcard(a).MatchString(arn)
				}
				if ok != r.Internal {
					t.Errorf("InternalRoutesPolicy allows %s %s: %v; internal: %v", r.Method, r.Path, ok, r.Internal)
				}
			}
			if s.params["BackendRoleName"] != "" {
				roles := s.resource("InternalRoutesPolicy")["Properties"].(map[string]any)["Roles"]
				if scalar(roles) != s.params["BackendRoleName"] {
					t.Errorf("BackendRoleName gets the policy: %v", roles)
				}
			}
		})
	}
}

func knownFormat(arn string) bool {
	for _, f := range arnFormats {
		if f.MatchString(arn) {
			return true
		}
	}
	return false
}

// TestParameterPatternsRefuseWhatWouldBreakTheStack: values that would
// give a policy ARN that matches nothing (a parameter name without its
// leading /, a partial secret ARN) or a function that cannot start are
// refused by the template before anything is created.
func TestParameterPatternsRefuseWhatWouldBreakTheStack(t *testing.T) {
	params := translatedTemplate(t)["Parameters"].(map[string]any)
	cases := map[string]struct{ good, bad []string }{
		"ConfigParameterName": {
			good: []string{"", "/otpguard", "/shop/prod/otpguard-config", "/a.b/c_d"},
			bad:  []string{"otpguard/config", "shop", "/shop/", "//x", "/with space", "/" + strings.Repeat("a/", 16) + "x"},
		},
		"ExistingRedisPasswordSecretArn": {
			good: []string{"", fullSecret},
			bad:  []string{"arn:aws:secretsmanager:eu-west-3:123456789012:secret:prod/redis-password", "prod/redis-password", "arn:aws:ssm:eu-west-3:123456789012:parameter/x"},
		},
		"CognitoClientSecretArn": {
			good: []string{"", cognitoSecret},
			// (a partial ARN whose name ends in "-" and six letters cannot
			// be told from a full one: AWS advises against such names)
			bad: []string{"arn:aws:secretsmanager:eu-west-3:123456789012:secret:cognito", "cognito-client"},
		},
		"SecretsKmsKeyArn":   {good: []string{"", kmsKey}, bad: []string{"alias/aws/secretsmanager", "1234abcd-12ab-34cd-56ef-1234567890ab"}},
		"AuthUpstreamUrl":    {good: []string{"", "https://auth.example.com", "http://10.0.1.5:8080/api"}, bad: []string{"auth.example.com", "ftp://x", "https://x/login?next=1", "https://user:pw@x"}},
		"BackendRoleName":    {good: []string{"", "shop-backend"}, bad: []string{"arn:aws:iam::123456789012:role/shop-backend"}},
		"AlarmTopicArn":      {good: []string{"", "arn:aws:sns:eu-west-3:123456789012:oncall"}, bad: []string{"oncall"}},
		"ExistingRedisUrl":   {good: []string{"", "rediss://u@h:6379", "h1:6379,h2:6379"}, bad: []string{"rediss://h:6379 x"}},
		"ExistingUserPoolId": {good: []string{"", "eu-west-3_AbCdEf12"}, bad: []string{"AbCdEf"}},
	}
	for name, c := range cases {
		p, ok := params[name].(map[string]any)
		pat, _ := p["AllowedPattern"].(string)
		if !ok || pat == "" {
			t.Errorf("%s has no AllowedPattern", name)
			continue
		}
		re := regexp.MustCompile(pat)
		for _, v := range c.good {
			if !re.MatchString(v) {
				t.Errorf("%s refuses %q", name, v)
			}
		}
		for _, v := range c.bad {
			if re.MatchString(v) {
				t.Errorf("%s accepts %q", name, v)
			}
		}
	}
}

// TestTheDefaultsFitANewAccount: with the default parameters no function
// reserves concurrency (a reservation needs the account's quota to exceed
// all of them by 100; new accounts may have a quota of 10), and the send
// function's cost cap is a parameter that reserves when set.
func TestTheDefaultsFitANewAccount(t *testing.T) {
	s := newStack(t)
	for _, f := range functions(t) {
		if rc, ok := s.resource(f.name)["Properties"].(map[string]any)["ReservedConcurrentExecutions"]; ok {
			t.Errorf("%s reserves %v by default", f.name, rc)
		}
	}
	capped := newStack(t, "SendReservedConcurrency", "20")
	if rc := capped.resource("SendFunction")["Properties"].(map[string]any)["ReservedConcurrentExecutions"]; scalar(rc) != "20" {
		t.Errorf("SendReservedConcurrency=20 gives the send function %v", rc)
	}
	all := newStack(t, "ReservedConcurrency", "10")
	if rc := all.resource("VerifyFunction")["Properties"].(map[string]any)["ReservedConcurrentExecutions"]; scalar(rc) != "10" {
		t.Errorf("ReservedConcurrency=10 gives the verify function %v", rc)
	}
}

// TestVPCEndpointsAreChosenPerService: only the listed services get an
// endpoint (a VPC that has one with private DNS cannot take another), in
// the subnets given for them.
func TestVPCEndpointsAreChosenPerService(t *testing.T) {
	none := newStack(t)
	for _, e := range []string{"SecretsManagerEndpoint", "SsmEndpoint", "SnsEndpoint", "EndpointSecurityGroup"} {
		if none.resource(e) != nil {
			t.Errorf("%s is created by default", e)
		}
	}
	some := newStack(t, "VpcEndpoints", "ssm,sns", "EndpointSubnetIds", "subnet-0a,subnet-0b")
	if some.resource("SecretsManagerEndpoint") != nil || some.resource("SsmEndpoint") == nil || some.resource("SnsEndpoint") == nil {
		t.Error("VpcEndpoints=ssm,sns does not create exactly those")
	}
	if sn := scalar(some.resource("SsmEndpoint")["Properties"].(map[string]any)["SubnetIds"]); sn != "subnet-0a,subnet-0b" {
		t.Errorf("the endpoints are in %s, not EndpointSubnetIds", sn)
	}
}

// TestTheUpstreamPortIsOpen: AuthMode http opens the upstream's port
// (443 is open already) and tells the functions, which refuse a URL on
// another port.
func TestTheUpstreamPortIsOpen(t *testing.T) {
	s := newStack(t, "AuthMode", "http", "AuthUpstreamUrl", "http://10.0.1.5:8080", "AuthUpstreamPort", "8080")
	e := s.resource("FunctionToUpstreamEgress")
	if e == nil || scalar(e["Properties"].(map[string]any)["FromPort"]) != "8080" {
		t.Fatalf("no egress to the upstream's port: %v", e)
	}
	for _, fn := range []string{"LoginFunction", "SignupFunction"} {
		if got := s.env(fn)["AUTH_UPSTREAM_PORT"]; got != "8080" {
			t.Errorf("%s: AUTH_UPSTREAM_PORT %q", fn, got)
		}
	}
	if newStack(t, "AuthMode", "http", "AuthUpstreamUrl", "https://auth.example.com").resource("FunctionToUpstreamEgress") != nil {
		t.Error("an https upstream on 443 gets a second egress rule")
	}
}

var _ = lambdaapp.Functions

// TestTheAppClientWritesOnlyTheSignupAttributes: the user pool's app
// client may set at signup the address and the attributes otpguard's
// default signup.attributes passes, nothing more (a client talking to
// Cognito directly could otherwise set email_verified).
func TestTheAppClientWritesOnlyTheSignupAttributes(t *testing.T) {
	s := newStack(t)
	got := anyStrings(s.resource("UserPoolClient")["Properties"].(map[string]any)["WriteAttributes"])
	want := append([]string{"email"}, config.Default().Signup.Attributes...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the app client writes %v; want the address and signup.attributes: %v", got, want)
	}
}
