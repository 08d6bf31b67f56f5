package app

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/redis/go-redis/v9"
)

// AWSConfig is the SDK configuration from the environment: the region,
// the credentials the environment holds (Lambda puts its role's there;
// none means anonymous calls, which Cognito's InitiateAuth and SignUp
// take), a bounded retry count, and AWS_ENDPOINT_URL when set. Built by
// hand rather than with config.LoadDefaultConfig, whose other credential
// providers (SSO, STS, IMDS, profiles) a function never uses and which add
// megabytes to each binary.
func AWSConfig(getenv func(string) string, region string) aws.Config {
	cfg := aws.Config{Region: region, RetryMaxAttempts: 2, Credentials: aws.AnonymousCredentials{}}
	if id, key := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"); id != "" && key != "" {
		cfg.Credentials = aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, key, getenv("AWS_SESSION_TOKEN")))
	}
	if u := getenv("AWS_ENDPOINT_URL"); u != "" {
		cfg.BaseEndpoint = aws.String(u)
	}
	return cfg
}

// Endpoint is the SDK's AWS_ENDPOINT_URL_<SERVICE>, else AWS_ENDPOINT_URL.
func Endpoint(getenv func(string) string, service string) string {
	if u := getenv("AWS_ENDPOINT_URL_" + service); u != "" {
		return u
	}
	return getenv("AWS_ENDPOINT_URL")
}

// BearerAdmin authorizes the internal routes with a bearer token,
// compared in constant time; an empty token refuses everyone.
func BearerAdmin(token string) func(*http.Request) bool {
	want := []byte("Bearer " + token)
	return func(r *http.Request) bool {
		got := []byte(r.Header.Get("Authorization"))
		return token != "" && subtle.ConstantTimeCompare(got, want) == 1
	}
}

// LogRedis sends go-redis's own messages (dial failures, pool notices,
// printed as plain text on stderr by default) into the JSON log.
func LogRedis(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
