// Package lambdaapp is a Lambda function's init, once per container: the
// typed environment, the secrets from Secrets Manager, the config document
// from SSM Parameter Store, the Redis client, the senders or the
// authenticator, then the App of internal/app behind the API Gateway
// adapter. Warm invocations reuse all of it.
//
// The config document and the token keys are read again in place, at most
// every CONFIG_REFRESH (default 1m), on the invocation that finds them
// stale and without holding it: a new document takes effect on that
// container's next invocations; a bad one is rejected (logged, and counted
// as the ConfigRejected metric) and the last good one stays.
package lambdaapp

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/emf"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/token"
	"github.com/otpguard/otpguard/internal/apigw"
	"github.com/otpguard/otpguard/internal/app"
)

// Function describes one Lambda function: what its routes need.
type Function struct {
	Name string
	// Senders: the send function alone delivers (and may call SES, SNS).
	Senders Senders
	// Auth: login and signup front the authenticator.
	Auth bool
	// Internal: the backend's routes, behind the IAM authorizer.
	Internal bool
}

// Parts are the pieces only some functions link, passed in by their main
// package so that the others' binaries do not carry them: the SES and SNS
// clients (internal/delivery), the authenticators (internal/authenv).
type Parts struct {
	// Senders builds the senders from the environment (send).
	Senders func(getenv func(string) string, cfg aws.Config) (func(guard.Store) (api.Sender, error), error)
	// Auth builds the authenticator AUTH names (login, signup); allowLocal
	// is false in Lambda.
	Auth func(getenv func(string) string, allowLocal bool, clientSecret func() (string, error)) (api.Authenticator, func() error, error)
}

// Senders selects the delivery channels a function may use.
type Senders int

// The channels.
const (
	Email Senders = 1 << iota
	SMS
)

// The functions of template.yaml.
var (
	Send    = Function{Name: "send", Senders: Email | SMS}
	Verify  = Function{Name: "verify"}
	Jwks    = Function{Name: "jwks"}
	Health  = Function{Name: "health"}
	Login   = Function{Name: "login", Auth: true}
	Signup  = Function{Name: "signup", Auth: true}
	Backend = Function{Name: "backend", Internal: true}
)

// Functions lists them all.
var Functions = []Function{Send, Verify, Jwks, Health, Login, Signup, Backend}

// Vars lists the environment variables a function reads: the template
// test checks that template.yaml sets each.
func Vars(fn Function) []string {
	v := []string{"REDIS_URL", "REDIS_PASSWORD_SECRET_ID", "GUARD_CONFIG_PARAM", "GUARD_HASH_SECRET_ID", "GUARD_SIGNING_SECRET_ID", "CONFIG_REFRESH", "STACK_NAME"}
	if fn.Senders&Email != 0 {
		v = append(v, "SES_FROM", "SES_CONFIGURATION_SET", "EMAIL_PER_SECOND")
	}
	if fn.Senders&SMS != 0 {
		v = append(v, "SMS_SENDER_ID", "SMS_ORIGINATION_NUMBER", "SMS_MAX_PRICE", "SMS_PER_SECOND")
	}
	if fn.Senders != 0 {
		v = append(v, "DELIVERY_MAX_WAIT", "PROVIDER_TIMEOUT")
	}
	if fn.Auth {
		v = append(v, "AUTH", "COGNITO_USER_POOL_ID", "COGNITO_CLIENT_ID", "COGNITO_CLIENT_SECRET_ID", "AUTH_UPSTREAM_URL", "AUTH_TIMEOUT")
	}
	return v
}

// Env is what every function reads from its environment.
type Env struct {
	RedisURL        string        // REDIS_URL: rediss://user@host:port?cluster=true for ElastiCache Serverless
	RedisSecretID   string        // REDIS_PASSWORD_SECRET_ID: the Redis AUTH password (ElastiCache user); "" = none
	ConfigParam     string        // GUARD_CONFIG_PARAM: SSM parameter holding the YAML config; "" or missing = defaults
	HashSecretID    string        // GUARD_HASH_SECRET_ID: the key-hashing secret
	SigningSecretID string        // GUARD_SIGNING_SECRET_ID: the token key (AWSCURRENT signs; AWSPREVIOUS, AWSPENDING also in the JWKS)
	Refresh         time.Duration // CONFIG_REFRESH: how often the config and keys are read again; default 1m
	Stack           string        // STACK_NAME: the metrics' Stack dimension
	Region          string        // AWS_REGION
}

// FromEnv reads the common environment; a missing or malformed variable
// is an error naming it.
func FromEnv(getenv func(string) string) (Env, error) {
	e := Env{
		RedisURL: getenv("REDIS_URL"), RedisSecretID: getenv("REDIS_PASSWORD_SECRET_ID"), ConfigParam: getenv("GUARD_CONFIG_PARAM"),
		HashSecretID: getenv("GUARD_HASH_SECRET_ID"), SigningSecretID: getenv("GUARD_SIGNING_SECRET_ID"),
		Stack: getenv("STACK_NAME"), Refresh: time.Minute, Region: getenv("AWS_REGION"),
	}
	var errs []error
	for name, v := range map[string]string{"REDIS_URL": e.RedisURL, "GUARD_HASH_SECRET_ID": e.HashSecretID, "GUARD_SIGNING_SECRET_ID": e.SigningSecretID, "AWS_REGION": e.Region} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
	}
	if v := getenv("CONFIG_REFRESH"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > time.Hour {
			errs = append(errs, fmt.Errorf("CONFIG_REFRESH: want a duration from 1s to 1h, got %q", v))
		}
		e.Refresh = d
	}
	return e, errors.Join(errs...)
}

// Main initializes fn and serves its invocations; an init error ends the
// process, and Lambda reports it.
func Main(fn Function, p Parts) {
	h, err := Init(context.Background(), fn, p, os.Getenv, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "otpguard %s init: %v\n", fn.Name, err)
		os.Exit(1)
	}
	lambda.Start(apigw.Handler(h))
}

// Init builds a function's handler: everything a container keeps.
func Init(ctx context.Context, fn Function, p Parts, getenv func(string) string, stdout, stderr io.Writer) (http.Handler, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	app.LogRedis(log)
	env, err := FromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("lambda environment: %w", err)
	}
	awsCfg := app.AWSConfig(getenv, env.Region)
	sm, ssm := newSecrets(awsCfg), newParameters(awsCfg)
	rt := &runtime{env: env, log: log, sm: sm, ssm: ssm, metrics: emf.New(stdout, nil, env.Stack)}
	// The secrets, the config and the Redis connection (with the library
	// load) are independent: fetched side by side, init waits for the
	// slowest rather than for their sum.
	var (
		hash, doc, keyIDs, redisURL string
		cfg                         guard.Config
		keys                        app.Keys
		errs                        [4]error
		wg                          sync.WaitGroup
	)
	wg.Go(func() {
		hash, errs[0] = sm.get(ctx, env.HashSecretID, "")
		if errs[0] == nil && len(hash) < 16 {
			errs[0] = fmt.Errorf("secret %s: want a string of at least 16 bytes", env.HashSecretID)
		}
	})
	wg.Go(func() { cfg, doc, errs[1] = rt.config(ctx) })
	wg.Go(func() { keys, keyIDs, errs[2] = rt.keys(ctx) })
	wg.Go(func() {
		redisURL = env.RedisURL
		if env.RedisSecretID != "" {
			var pass string
			if pass, errs[3] = sm.get(ctx, env.RedisSecretID, ""); errs[3] != nil {
				return
			}
			if redisURL, errs[3] = withPassword(redisURL, pass); errs[3] != nil {
				errs[3] = fmt.Errorf("REDIS_URL: %w", errs[3])
			}
		}
	})
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	rt.doc, rt.keyIDs, rt.keysNow = doc, keyIDs, keys
	rdb, err := redisstore.NewClient(redisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	s := app.Settings{Redis: rdb, Secret: []byte(hash), Log: log, Observer: rt.metrics}
	if fn.Senders != 0 {
		if p.Senders == nil {
			return nil, fmt.Errorf("function %s delivers codes but was built without senders", fn.Name)
		}
		if s.Senders, err = p.Senders(getenv, awsCfg); err != nil {
			return nil, err
		}
	}
	if fn.Auth {
		if p.Auth == nil {
			return nil, fmt.Errorf("function %s fronts the authenticator but was built without one", fn.Name)
		}
		var clientSecret func() (string, error)
		if id := getenv("COGNITO_CLIENT_SECRET_ID"); id != "" {
			clientSecret = func() (string, error) { return sm.get(ctx, id, "") }
		}
		if s.Auth, _, err = p.Auth(getenv, false, clientSecret); err != nil {
			return nil, err
		}
	}
	if fn.Internal {
		// The gateway's IAM authorizer checked the SigV4 signature; a
		// request without its verdict did not come through it.
		s.Admin = func(r *http.Request) bool { return apigw.IAMCaller(r.Context()) != "" }
	}
	if rt.app, err = app.New(ctx, s, cfg, keys); err != nil {
		return nil, err
	}
	rt.last.Store(time.Now().UnixNano())
	return rt, nil
}

// runtime is the function's handler: the App, refreshed in place.
type runtime struct {
	env     Env
	log     *slog.Logger
	sm      *secrets
	ssm     *parameters
	metrics *emf.Observer
	app     *app.App

	last       atomic.Int64 // unix ns of the last refresh started
	refreshing atomic.Bool
	mu         sync.Mutex // guards doc and keyIDs
	doc        string     // the config document in force
	keyIDs     string     // the secret versions of the keys in force
	keysNow    app.Keys   // the keys in force
}

func (rt *runtime) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if time.Since(time.Unix(0, rt.last.Load())) >= rt.env.Refresh && rt.refreshing.CompareAndSwap(false, true) {
		rt.last.Store(time.Now().UnixNano())
		go func() {
			defer rt.refreshing.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rt.refresh(ctx)
		}()
	}
	rt.app.ServeHTTP(w, r)
}

// refresh reads the config and the keys again and reloads what changed.
func (rt *runtime) refresh(ctx context.Context) {
	cfg, doc, cerr := rt.config(ctx)
	keys, keyIDs, kerr := rt.keys(ctx)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	// Each half stands on its own: a bad document does not hold back a
	// key rotation, nor a failed key read a new document.
	if cerr != nil {
		rt.log.ErrorContext(ctx, "config refresh rejected; the last good config stays", "err", cerr)
		rt.metrics.Count(ctx, "ConfigRejected")
		cfg, doc = rt.app.Config(), rt.doc
	}
	if kerr != nil {
		rt.log.ErrorContext(ctx, "signing key refresh failed; the keys in force stay", "err", kerr)
		rt.metrics.Count(ctx, "ConfigRejected")
		keys, keyIDs = rt.keysNow, rt.keyIDs
	}
	if doc == rt.doc && keyIDs == rt.keyIDs {
		return
	}
	if err := rt.app.Reload(cfg, keys); err != nil {
		rt.log.ErrorContext(ctx, "config refresh rejected; the last good config stays", "err", err)
		rt.metrics.Count(ctx, "ConfigRejected")
		return
	}
	rt.doc, rt.keyIDs, rt.keysNow = doc, keyIDs, keys
	rt.log.InfoContext(ctx, "config refreshed", "config", docID(doc), "keys", keyIDs)
}

// config reads the config document: a parameter that does not exist (the
// stack never creates it, so an update never resets it) means defaults.
func (rt *runtime) config(ctx context.Context) (guard.Config, string, error) {
	if rt.env.ConfigParam == "" {
		return guard.DefaultConfig(), "", nil
	}
	doc, found, err := rt.ssm.get(ctx, rt.env.ConfigParam)
	if err != nil {
		return guard.Config{}, "", fmt.Errorf("config parameter %s: %w", rt.env.ConfigParam, err)
	}
	if !found {
		rt.log.WarnContext(ctx, "the config parameter does not exist; the defaults apply", "parameter", rt.env.ConfigParam)
	}
	cfg, err := guard.ParseConfig([]byte(doc))
	if err != nil {
		return guard.Config{}, "", fmt.Errorf("config parameter %s: %w", rt.env.ConfigParam, err)
	}
	return cfg, doc, nil
}

// keys reads the signing key's versions: AWSCURRENT signs; AWSPREVIOUS
// (tokens it signed are still live) and AWSPENDING (a key about to sign,
// which backends should learn first) are in the JWKS too.
func (rt *runtime) keys(ctx context.Context) (app.Keys, string, error) {
	id := rt.env.SigningSecretID
	stages := []string{"AWSCURRENT", "AWSPREVIOUS", "AWSPENDING"}
	var vals [3]string
	var errs [3]error
	var wg sync.WaitGroup
	for i, stage := range stages {
		wg.Go(func() { vals[i], errs[i] = rt.sm.get(ctx, id, stage) })
	}
	wg.Wait()
	if errs[0] != nil {
		return app.Keys{}, "", errs[0]
	}
	key, err := KeyFromSecret(vals[0])
	if err != nil {
		return app.Keys{}, "", fmt.Errorf("signing secret %s: %w", id, err)
	}
	keys := app.Keys{Signing: key}
	ids := docID(vals[0])
	for i := 1; i < len(stages); i++ {
		if errors.Is(errs[i], errNotFound) {
			continue
		}
		if errs[i] != nil {
			return app.Keys{}, "", errs[i]
		}
		k, err := KeyFromSecret(vals[i])
		if err != nil {
			rt.log.WarnContext(ctx, "a signing key version is unreadable; it is left out of the JWKS", "stage", stages[i], "err", err)
			continue
		}
		keys.Others = append(keys.Others, k.Public().(ed25519.PublicKey))
		ids += "," + stages[i] + ":" + docID(vals[i])
	}
	return keys, ids, nil
}

// withPassword puts the Redis AUTH password into each URL of a REDIS_URL
// (one URL, or a comma-separated list of cluster nodes), keeping its user
// name ("default" when it has none).
func withPassword(urls, pass string) (string, error) {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "redis://" + p
		}
		u, err := url.Parse(p)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("%q is not a redis:// or rediss:// URL", p)
		}
		user := "default"
		if u.User != nil && u.User.Username() != "" {
			user = u.User.Username()
		}
		u.User = url.UserPassword(user, pass)
		parts[i] = u.String()
	}
	return strings.Join(parts, ","), nil
}

// docID names a document in logs without showing it.
func docID(s string) string {
	sum := sha256.Sum256([]byte(s))
	return fmt.Sprintf("%x", sum[:4])
}

// KeyFromSecret reads the token signing key from its secret: a PKCS #8
// PEM or base64 seed (see token.ParseKey), or else any random string of
// at least 32 bytes (what Secrets Manager generates), hashed into the
// Ed25519 seed.
func KeyFromSecret(s string) (ed25519.PrivateKey, error) {
	if k, err := token.ParseKey(s); err == nil {
		return k, nil
	}
	if len(s) < 32 {
		return nil, errors.New("want a PKCS #8 PEM Ed25519 key, a base64 32-byte seed, or a random string of at least 32 bytes")
	}
	seed := sha256.Sum256([]byte("otpguard token signing key\x00" + s))
	return ed25519.NewKeyFromSeed(seed[:]), nil
}
