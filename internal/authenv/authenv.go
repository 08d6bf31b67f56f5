// Package authenv builds the authenticator AUTH names from the
// environment. Only the binaries that front login and signup link it (and
// so the Cognito client, bcrypt and the HTTP upstream).
package authenv

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/cognito"
	"github.com/otpguard/otpguard/guard/upstream"
	"github.com/otpguard/otpguard/guard/users"
	"github.com/otpguard/otpguard/internal/awsjson"
)

// Authenticator builds the authenticator AUTH names (local, the default
// where local is allowed; cognito; http) from its variables:
//
//	AUTH=local    USERS_PATH (JSON lines of {"username","passwordHash"}; unset: in memory)
//	AUTH=cognito  COGNITO_CLIENT_ID, COGNITO_USER_POOL_ID (its region, when AWS_REGION is unset),
//	              COGNITO_CLIENT_SECRET (when the app client has one); AWS_ENDPOINT_URL_COGNITO_IDENTITY_PROVIDER
//	              or AWS_ENDPOINT_URL point it at a local Cognito
//	AUTH=http     AUTH_UPSTREAM_URL (POST <url>/login, <url>/signup), AUTH_TIMEOUT (default 5s),
//	              AUTH_UPSTREAM_PORT (the port the network opens to it: a URL on another is refused)
//
// clientSecret, when not nil, supplies the Cognito client secret instead
// of COGNITO_CLIENT_SECRET (Lambda reads it from Secrets Manager). close
// releases what the authenticator holds.
func Authenticator(getenv func(string) string, allowLocal bool, clientSecret func() (string, error)) (a api.Authenticator, close func() error, err error) {
	close = func() error { return nil }
	kind := getenv("AUTH")
	if kind == "" && allowLocal {
		kind = "local"
	}
	switch kind {
	case "local":
		if !allowLocal {
			return nil, close, errors.New("AUTH=local keeps users in this process; in Lambda use cognito or http")
		}
		u, err := users.Open(getenv("USERS_PATH"), 0)
		if err != nil {
			return nil, close, err
		}
		return u, u.Close, nil
	case "cognito":
		a, err := cognitoFromEnv(getenv, clientSecret)
		return a, close, err
	case "http":
		timeout := 5 * time.Second
		if v := getenv("AUTH_TIMEOUT"); v != "" {
			if timeout, err = time.ParseDuration(v); err != nil || timeout <= 0 || timeout > time.Minute {
				return nil, close, fmt.Errorf("AUTH_TIMEOUT: want a duration up to 1m such as 3s, got %q", v)
			}
		}
		if err := portMatches(getenv("AUTH_UPSTREAM_URL"), getenv("AUTH_UPSTREAM_PORT")); err != nil {
			return nil, close, err
		}
		u, err := upstream.New(getenv("AUTH_UPSTREAM_URL"), timeout, nil)
		return u, close, err
	}
	return nil, close, fmt.Errorf("AUTH: want local, cognito or http, got %q", kind)
}

// cognitoFromEnv is AUTH=cognito's authenticator: the app client, its
// region and secret, and the endpoint (a local Cognito in tests).
func cognitoFromEnv(getenv func(string) string, clientSecret func() (string, error)) (api.Authenticator, error) {
	id, pool := getenv("COGNITO_CLIENT_ID"), getenv("COGNITO_USER_POOL_ID")
	if id == "" {
		return nil, errors.New("AUTH=cognito needs COGNITO_CLIENT_ID")
	}
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	if before, _, ok := strings.Cut(pool, "_"); region == "" && ok {
		region = before
	}
	if region == "" {
		return nil, errors.New("AUTH=cognito needs AWS_REGION (or COGNITO_USER_POOL_ID, whose prefix is its region)")
	}
	secret := getenv("COGNITO_CLIENT_SECRET")
	if clientSecret != nil {
		var err error
		if secret, err = clientSecret(); err != nil {
			return nil, err
		}
	}
	// InitiateAuth and SignUp take no credentials: sent unsigned, as the
	// SDK sends them.
	cfg := awsjson.ForService(awsjson.Config(getenv, region), getenv, "COGNITO_IDENTITY_PROVIDER")
	cfg.Credentials = aws.AnonymousCredentials{}
	return cognito.New(awsjson.New(cfg, "cognito-idp", "AWSCognitoIdentityProviderService"), id, secret), nil
}

// portMatches checks the upstream URL against AUTH_UPSTREAM_PORT, the
// port the stack's security group opens to it (when set): a URL on
// another port would time out on every login, so the function refuses
// it at init, naming both.
func portMatches(rawURL, port string) error {
	if port == "" {
		return nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil // upstream.New names the problem
	}
	got := u.Port()
	if got == "" {
		got = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	if got != port {
		return fmt.Errorf("AUTH_UPSTREAM_URL is on port %s, but the stack opens port %s to it (AuthUpstreamPort)", got, port)
	}
	return nil
}
