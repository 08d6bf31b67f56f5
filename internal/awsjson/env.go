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

// ForService is cfg with the endpoint the SDK's client of service reads
// from the environment, when one is set: AWS_ENDPOINT_URL_<SERVICE>
// (SSM, CLOUDWATCH, COGNITO_IDENTITY_PROVIDER: a local, VPC or FIPS
// endpoint), else AWS_ENDPOINT_URL.
func ForService(cfg aws.Config, getenv func(string) string, service string) aws.Config {
	u := getenv("AWS_ENDPOINT_URL_" + service)
	if u == "" {
		u = getenv("AWS_ENDPOINT_URL")
	}
	if u != "" {
		cfg.BaseEndpoint = aws.String(u)
	}
	return cfg
}
