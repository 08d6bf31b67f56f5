package awsjson

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Config is the SDK configuration from the environment: the region,
// the credentials the environment holds (Lambda puts its role's there;
// none means anonymous calls, which Cognito's InitiateAuth and SignUp
// take), a bounded retry count, and AWS_ENDPOINT_URL when set. Built by
// hand rather than with config.LoadDefaultConfig, whose other credential
// providers (SSO, STS, IMDS, profiles) a function never uses and which add
// megabytes to each binary.
func Config(getenv func(string) string, region string) aws.Config {
	cfg := aws.Config{Region: region, RetryMaxAttempts: 2, Credentials: aws.AnonymousCredentials{}}
	if id, key := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"); id != "" && key != "" {
		cfg.Credentials = aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, key, getenv("AWS_SESSION_TOKEN")))
	}
	if u := getenv("AWS_ENDPOINT_URL"); u != "" {
		cfg.BaseEndpoint = aws.String(u)
	}
	return cfg
}

// EnvEndpoint is the SDK's AWS_ENDPOINT_URL_<SERVICE>, else AWS_ENDPOINT_URL.
func EnvEndpoint(getenv func(string) string, service string) string {
	if u := getenv("AWS_ENDPOINT_URL_" + service); u != "" {
		return u
	}
	return getenv("AWS_ENDPOINT_URL")
}
