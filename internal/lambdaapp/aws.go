package lambdaapp

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/internal/awsjson"
)

// errNotFound: the secret version or parameter does not exist.
var errNotFound = errors.New("not found")

// secrets reads Secrets Manager (GetSecretValue, DescribeSecret).
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
	return s.value(ctx, id, in)
}

// getVersion returns the string of secret id's version vid.
func (s *secrets) getVersion(ctx context.Context, id, vid string) (string, error) {
	return s.value(ctx, id, map[string]string{"SecretId": id, "VersionId": vid})
}

func (s *secrets) value(ctx context.Context, id string, in map[string]string) (string, error) {
	var out struct{ SecretString *string }
	err := retried(ctx, func() error { return s.c.Call(ctx, "GetSecretValue", in, &out) })
	if awsjson.Is(err, "ResourceNotFoundException") {
		return "", fmt.Errorf("secret %s %s: %w", id, in["VersionStage"]+in["VersionId"], errNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", id, err)
	}
	if out.SecretString == nil {
		return "", fmt.Errorf("secret %s: not a string secret", id)
	}
	return *out.SecretString, nil
}

// versions returns secret id's versions and their stages.
func (s *secrets) versions(ctx context.Context, id string) (map[string][]string, error) {
	var out struct{ VersionIdsToStages map[string][]string }
	if err := retried(ctx, func() error { return s.c.Call(ctx, "DescribeSecret", map[string]string{"SecretId": id}, &out) }); err != nil {
		return nil, fmt.Errorf("secret %s: %w", id, err)
	}
	return out.VersionIdsToStages, nil
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
	err = retried(ctx, func() error {
		return p.c.Call(ctx, "GetParameter", map[string]any{"Name": name, "WithDecryption": true}, &out)
	})
	if awsjson.Is(err, "ParameterNotFound") {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return out.Parameter.Value, true, nil
}

// retried calls f again while the service throttles, after pauses drawn
// from a doubling range (full jitter: 0–100ms, 0–200ms, … up to 4 tries),
// within ctx. awsjson.Call itself retries a 5xx once.
func retried(ctx context.Context, f func() error) error {
	var err error
	for attempt := range 4 {
		if err = f(); err == nil || !throttled(err) {
			return err
		}
		pause := time.Duration(mrand.Int64N(int64(100*time.Millisecond) << attempt))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
	return err
}

func throttled(err error) bool {
	var e *awsjson.Error
	return errors.As(err, &e) && (e.Code == "ThrottlingException" || e.Code == "TooManyRequestsException" || e.Status == 429)
}
