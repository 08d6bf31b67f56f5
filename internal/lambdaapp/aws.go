package lambdaapp

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
)

// errNotFound: the secret version or parameter does not exist.
var errNotFound = errors.New("not found")

// secrets reads Secrets Manager (GetSecretValue).
type secrets struct{ c *secretsmanager.Client }

func newSecrets(cfg aws.Config) *secrets { return &secrets{secretsmanager.NewFromConfig(cfg)} }

// get returns the string of secret id at stage ("" = AWSCURRENT).
func (s *secrets) get(ctx context.Context, id, stage string) (string, error) {
	in := &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)}
	if stage != "" {
		in.VersionStage = aws.String(stage)
	}
	out, err := s.c.GetSecretValue(ctx, in)
	var nf *smtypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return "", fmt.Errorf("secret %s %s: %w", id, stage, errNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", id, err)
	}
	return aws.ToString(out.SecretString), nil
}

// parameters reads SSM Parameter Store (GetParameter).
type parameters struct{ c *ssm.Client }

func newParameters(cfg aws.Config) *parameters { return &parameters{ssm.NewFromConfig(cfg)} }

// get returns the value of parameter name; found is false when it does
// not exist.
func (p *parameters) get(ctx context.Context, name string) (value string, found bool, err error) {
	out, err := p.c.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
	var nf *ssmtypes.ParameterNotFound
	if errors.As(err, &nf) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return aws.ToString(out.Parameter.Value), true, nil
}
