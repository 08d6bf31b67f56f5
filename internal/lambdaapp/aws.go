package lambdaapp

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/otpguard/otpguard/internal/awsjson"
)

// errNotFound: the secret version or parameter does not exist.
var errNotFound = errors.New("not found")

// secrets reads Secrets Manager (GetSecretValue).
type secrets struct{ c *awsjson.Client }

func newSecrets(cfg aws.Config) *secrets {
	return &secrets{awsjson.New(cfg, "secretsmanager", "secretsmanager")}
}

// get returns the string of secret id at stage ("" = AWSCURRENT).
func (s *secrets) get(ctx context.Context, id, stage string) (string, error) {
	in := map[string]string{"SecretId": id}
	if stage != "" {
		in["VersionStage"] = stage
	}
	var out struct{ SecretString *string }
	err := s.c.Call(ctx, "GetSecretValue", in, &out)
	if awsjson.Is(err, "ResourceNotFoundException") {
		return "", fmt.Errorf("secret %s %s: %w", id, stage, errNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", id, err)
	}
	if out.SecretString == nil {
		return "", fmt.Errorf("secret %s: not a string secret", id)
	}
	return *out.SecretString, nil
}

// parameters reads SSM Parameter Store (GetParameter).
type parameters struct{ c *awsjson.Client }

func newParameters(cfg aws.Config) *parameters {
	return &parameters{awsjson.New(cfg, "ssm", "AmazonSSM")}
}

// get returns the value of parameter name; found is false when it does
// not exist.
func (p *parameters) get(ctx context.Context, name string) (value string, found bool, err error) {
	var out struct{ Parameter struct{ Value string } }
	err = p.c.Call(ctx, "GetParameter", map[string]any{"Name": name, "WithDecryption": true}, &out)
	if awsjson.Is(err, "ParameterNotFound") {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return out.Parameter.Value, true, nil
}
