package awsjson_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/otpguard/otpguard/internal/awsjson"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
)

func config(url string) aws.Config {
	return aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")}
}

func TestSecretsAndParameters(t *testing.T) {
	fake := awsfake.New()
	defer fake.Close()
	fake.SetSecret("s", "current")
	fake.SetSecretStage("s", "AWSPREVIOUS", "previous")
	fake.SetParameter("/p", "doc")
	sm := awsjson.New(config(fake.URL), "secretsmanager", "secretsmanager")
	ctx := context.Background()
	for stage, want := range map[string]string{"": "current", "AWSPREVIOUS": "previous"} {
		in := map[string]string{"SecretId": "s"}
		if stage != "" {
			in["VersionStage"] = stage
		}
		var out struct{ SecretString string }
		if err := sm.Call(ctx, "GetSecretValue", in, &out); err != nil || out.SecretString != want {
			t.Errorf("stage %q: %q, %v; want %q", stage, out.SecretString, err, want)
		}
	}
	err := sm.Call(ctx, "GetSecretValue", map[string]string{"SecretId": "s", "VersionStage": "AWSPENDING"}, nil)
	if !awsjson.Is(err, "ResourceNotFoundException") {
		t.Errorf("a missing stage: %v", err)
	}
	ssm := awsjson.New(config(fake.URL), "ssm", "AmazonSSM")
	var p struct{ Parameter struct{ Value string } }
	if err := ssm.Call(ctx, "GetParameter", map[string]any{"Name": "/p"}, &p); err != nil || p.Parameter.Value != "doc" {
		t.Errorf("GetParameter: %+v %v", p, err)
	}
	if err := ssm.Call(ctx, "GetParameter", map[string]any{"Name": "/missing"}, &p); !awsjson.Is(err, "ParameterNotFound") {
		t.Errorf("a missing parameter: %v", err)
	}
	// The fake refuses unsigned calls: every call above was signed.
	for _, c := range fake.Calls() {
		if c == "" {
			t.Error("an unrecognised call")
		}
	}
}
