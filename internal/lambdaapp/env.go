package lambdaapp

import (
	"errors"
	"fmt"
	"time"
)

// Vars lists the environment variables a function reads: the template
// test checks that template.yaml sets each, and no others.
func Vars(fn Function) []string {
	v := []string{"REDIS_URL", "REDIS_PASSWORD_SECRET_ID", "GUARD_CONFIG_PARAM", "CONFIG_REFRESH", "STACK_NAME", "EVENT_BUS_NAME"}
	if fn.Hashes {
		v = append(v, "GUARD_HASH_SECRET_ID")
	}
	if fn.Signs {
		v = append(v, "GUARD_SIGNING_SECRET_ID", "KEY_REFRESH")
	}
	if fn.Senders&Email != 0 {
		v = append(v, "SES_FROM", "SES_CONFIGURATION_SET", "EMAIL_PER_SECOND")
	}
	if fn.Senders&SMS != 0 {
		v = append(v, "SMS_SENDER_ID", "SMS_ORIGINATION_NUMBER", "SMS_MAX_PRICE", "SMS_PER_SECOND")
	}
	if fn.Senders != 0 {
		v = append(v, "DELIVERY_MAX_WAIT", "PROVIDER_TIMEOUT", "DELIVERY_QUEUE_URL")
	}
	if fn.Senders != 0 && !fn.Queue {
		v = append(v, "DELIVERY_MODE", "DELIVERY_QUEUE_MAX_DEPTH")
	}
	if fn.Queue {
		v = append(v, "DELIVERY_MAX_RECEIVES")
	}
	if fn.Auth {
		v = append(v, "AUTH", "COGNITO_USER_POOL_ID", "COGNITO_CLIENT_ID", "COGNITO_CLIENT_SECRET_ID", "AUTH_UPSTREAM_URL",
			"AUTH_UPSTREAM_PORT", "AUTH_TIMEOUT")
	}
	if fn.Captcha {
		v = append(v, "CAPTCHA_SECRET_ID")
	}
	if fn.Trigger {
		v = append(v, "COGNITO_TRUSTED_CLIENTS")
	}
	if fn.KMS {
		v = append(v, "COGNITO_KMS_KEY_ARN")
	}
	return v
}

// Env is what every function reads from its environment.
type Env struct {
	RedisURL        string        // REDIS_URL: rediss://user@host:port?cluster=true for ElastiCache Serverless
	RedisSecretID   string        // REDIS_PASSWORD_SECRET_ID: the Redis AUTH password (ElastiCache user); "" = none
	ConfigParam     string        // GUARD_CONFIG_PARAM: SSM parameter holding the YAML config; "" or missing = defaults
	HashSecretID    string        // GUARD_HASH_SECRET_ID: the key-hashing secret (functions that hash)
	SigningSecretID string        // GUARD_SIGNING_SECRET_ID: the token key (functions that sign or publish keys)
	Refresh         time.Duration // CONFIG_REFRESH: how often the config is read again; default 1m
	KeyRefresh      time.Duration // KEY_REFRESH: how often the signing key's versions are read again; default 5m
	Stack           string        // STACK_NAME: the metrics' Stack dimension
	Region          string        // AWS_REGION
}

// FromEnv reads the common environment of fn; a missing or malformed
// variable is an error naming it.
func FromEnv(fn Function, getenv func(string) string) (Env, error) {
	e := Env{
		RedisURL: getenv("REDIS_URL"), RedisSecretID: getenv("REDIS_PASSWORD_SECRET_ID"), ConfigParam: getenv("GUARD_CONFIG_PARAM"),
		HashSecretID: getenv("GUARD_HASH_SECRET_ID"), SigningSecretID: getenv("GUARD_SIGNING_SECRET_ID"),
		Stack: getenv("STACK_NAME"), Refresh: time.Minute, KeyRefresh: 5 * time.Minute, Region: getenv("AWS_REGION"),
	}
	required := map[string]string{"REDIS_URL": e.RedisURL, "AWS_REGION": e.Region}
	if fn.Hashes {
		required["GUARD_HASH_SECRET_ID"] = e.HashSecretID
	}
	if fn.Signs {
		required["GUARD_SIGNING_SECRET_ID"] = e.SigningSecretID
	}
	var errs []error
	for name, v := range required {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
	}
	for name, d := range map[string]*time.Duration{"CONFIG_REFRESH": &e.Refresh, "KEY_REFRESH": &e.KeyRefresh} {
		if v := getenv(name); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x < time.Second || x > time.Hour {
				errs = append(errs, fmt.Errorf("%s: want a duration from 1s to 1h, got %q", name, v))
				continue
			}
			*d = x
		}
	}
	return e, errors.Join(errs...)
}
