// Package lambdaapp builds the otpguard API for a Lambda function: typed
// configuration from the environment, then, once per container (at init,
// reused by every warm invocation), the secrets from Secrets Manager, the
// config document from SSM Parameter Store, the Redis client and the
// SES and SNS clients.
package lambdaapp

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/emf"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/token"
)

// Senders selects the delivery channels a function may use; only the send
// function has any (and only it may call SES and SNS).
type Senders int

// The channels.
const (
	Email Senders = 1 << iota
	SMS
)

// Config is everything a function reads from its environment. The SAM
// template sets each variable; [Vars] lists them.
type Config struct {
	RedisURL        string        // REDIS_URL: rediss://host:port?cluster=true for ElastiCache Serverless
	ConfigParam     string        // GUARD_CONFIG_PARAM: SSM parameter holding the YAML config; "" = defaults
	HashSecretID    string        // GUARD_HASH_SECRET_ID: Secrets Manager secret, the key-hashing secret
	SigningSecretID string        // GUARD_SIGNING_SECRET_ID: Secrets Manager secret, the token key
	SESFrom         string        // SES_FROM: verified sender identity (send function)
	SESConfigSet    string        // SES_CONFIGURATION_SET: optional
	SMSSenderID     string        // SMS_SENDER_ID: optional
	SMSOrigination  string        // SMS_ORIGINATION_NUMBER: optional
	SMSMaxPrice     string        // SMS_MAX_PRICE: optional, USD per message
	EmailPerSecond  int64         // EMAIL_PER_SECOND: SES sending quota; default 1 (sandbox)
	SMSPerSecond    int64         // SMS_PER_SECOND: SMS quota; default 20
	DeliveryMaxWait time.Duration // DELIVERY_MAX_WAIT: longest wait for a provider turn; default 2s
	Senders         Senders
	ProviderTimeout time.Duration // PROVIDER_TIMEOUT: bound of one SES/SNS call; default 5s
	InitTimeout     time.Duration // bound of the init calls (secrets, SSM, Redis): 5s
	// Stdout receives the EMF metrics, Stderr the JSON logs.
	Stdout, Stderr *os.File
}

// Vars lists the environment variables FromEnv reads for a function with
// senders s: the template test checks that the SAM template sets each.
func Vars(s Senders) []string {
	v := []string{"REDIS_URL", "GUARD_CONFIG_PARAM", "GUARD_HASH_SECRET_ID", "GUARD_SIGNING_SECRET_ID"}
	if s&Email != 0 {
		v = append(v, "SES_FROM", "SES_CONFIGURATION_SET", "EMAIL_PER_SECOND")
	}
	if s&SMS != 0 {
		v = append(v, "SMS_SENDER_ID", "SMS_ORIGINATION_NUMBER", "SMS_MAX_PRICE", "SMS_PER_SECOND")
	}
	if s != 0 {
		v = append(v, "DELIVERY_MAX_WAIT", "PROVIDER_TIMEOUT")
	}
	return v
}

// FromEnv reads the function's configuration; a missing or malformed
// variable is an error naming it.
func FromEnv(getenv func(string) string, s Senders) (Config, error) {
	c := Config{
		RedisURL: getenv("REDIS_URL"), ConfigParam: getenv("GUARD_CONFIG_PARAM"),
		HashSecretID: getenv("GUARD_HASH_SECRET_ID"), SigningSecretID: getenv("GUARD_SIGNING_SECRET_ID"),
		Senders: s, InitTimeout: 5 * time.Second, Stdout: os.Stdout, Stderr: os.Stderr,
	}
	var errs []error
	for name, v := range map[string]string{"REDIS_URL": c.RedisURL, "GUARD_HASH_SECRET_ID": c.HashSecretID, "GUARD_SIGNING_SECRET_ID": c.SigningSecretID} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
	}
	num := func(name string, def int64) int64 {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s: want a whole number ≥ 1, got %q", name, v))
		}
		return n
	}
	dur := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s: want a duration such as 2s, got %q", name, v))
		}
		return d
	}
	if s&Email != 0 {
		c.SESFrom, c.SESConfigSet = getenv("SES_FROM"), getenv("SES_CONFIGURATION_SET")
		if c.SESFrom == "" {
			errs = append(errs, errors.New("SES_FROM is required (a verified SES identity)"))
		}
		c.EmailPerSecond = num("EMAIL_PER_SECOND", 1)
	}
	if s&SMS != 0 {
		c.SMSSenderID, c.SMSOrigination, c.SMSMaxPrice = getenv("SMS_SENDER_ID"), getenv("SMS_ORIGINATION_NUMBER"), getenv("SMS_MAX_PRICE")
		c.SMSPerSecond = num("SMS_PER_SECOND", 20)
	}
	if s != 0 {
		c.DeliveryMaxWait = dur("DELIVERY_MAX_WAIT", 2*time.Second)
		c.ProviderTimeout = dur("PROVIDER_TIMEOUT", 5*time.Second)
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("lambda environment: %w", errors.Join(errs...))
	}
	return c, nil
}

// App is what a function builds once per container, at init: the
// configuration, the AWS configuration and the Redis-backed guard. Its
// Handler is the shared API.
type App struct {
	Env    Config
	Config guard.Config
	AWS    aws.Config
	deps   api.Deps
	store  *redisstore.Store
}

// Init loads the secrets and the config document and connects to Redis.
// It is called once per container; warm invocations reuse what it built.
func Init(ctx context.Context, c Config) (*App, error) {
	ctx, cancel := context.WithTimeout(ctx, c.InitTimeout)
	defer cancel()
	log := slog.New(slog.NewJSONHandler(c.Stderr, nil))
	awsCfg, err := AWSConfig(os.Getenv)
	if err != nil {
		return nil, err
	}
	sm := secretsmanager.NewFromConfig(awsCfg)
	hashSecret, err := secret(ctx, sm, c.HashSecretID)
	if err != nil {
		return nil, err
	}
	signing, err := secret(ctx, sm, c.SigningSecretID)
	if err != nil {
		return nil, err
	}
	key, err := KeyFromSecret(signing)
	if err != nil {
		return nil, fmt.Errorf("signing secret %s: %w", c.SigningSecretID, err)
	}
	cfg := guard.DefaultConfig()
	if c.ConfigParam != "" {
		out, err := ssm.NewFromConfig(awsCfg).GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(c.ConfigParam), WithDecryption: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("config parameter %s: %w", c.ConfigParam, err)
		}
		if cfg, err = guard.ParseConfig([]byte(aws.ToString(out.Parameter.Value))); err != nil {
			return nil, fmt.Errorf("config parameter %s: %w", c.ConfigParam, err)
		}
	}

	rdb, err := redisstore.NewClient(c.RedisURL)
	if err != nil {
		return nil, err
	}
	store := redisstore.New(rdb)
	if err := store.Preload(ctx); err != nil {
		// Not fatal: the store recovers per request, and /healthz tells.
		log.Warn("redis not reachable at init", "err", err)
	}
	backstop, err := redisstore.NewMemory()
	if err != nil {
		return nil, err
	}
	g, err := guard.New(cfg, store, guard.Options{Secret: []byte(hashSecret), Backstop: backstop})
	if err != nil {
		return nil, err
	}
	codes, err := otp.New(cfg, redisstore.NewCodes(rdb), []byte(hashSecret))
	if err != nil {
		return nil, err
	}
	tokens, err := token.NewSigner(key, cfg.Token.Issuer, cfg.Token.TTL)
	if err != nil {
		return nil, err
	}
	return &App{Env: c, Config: cfg, AWS: awsCfg, store: store, deps: api.Deps{
		Config: cfg, Guard: g, Codes: codes, Tokens: tokens, Log: log,
		Health:   func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		Observer: emf.New(c.Stdout, nil),
	}}, nil
}

// Paced wraps a provider sender: each call bounded by PROVIDER_TIMEOUT and
// paced to perSecond sends (shared by every container through Redis),
// waiting at most DELIVERY_MAX_WAIT for a turn.
func (a *App) Paced(s api.Sender, name string, perSecond int64) (api.Sender, error) {
	pacer, err := guard.NewPacer(a.store, name, perSecond, time.Second, a.Config.Store.Timeout)
	if err != nil {
		return nil, err
	}
	return api.Paced(timed(s, a.Env.ProviderTimeout), pacer, a.Env.DeliveryMaxWait), nil
}

// Handler returns the API, delivering with senders (none for the
// functions that do not send).
func (a *App) Handler(senders api.ByChannel) (http.Handler, error) {
	d := a.deps
	d.Sender = senders
	return api.NewServer(d)
}

// AWSConfig is the SDK configuration of a Lambda function: the region and
// the credentials Lambda puts in the environment, and AWS_ENDPOINT_URL
// when set (the tests' local endpoint). Built by hand rather than with
// config.LoadDefaultConfig, whose other credential providers (SSO, STS,
// IMDS, profiles) a function never uses and which add megabytes to each
// binary.
func AWSConfig(getenv func(string) string) (aws.Config, error) {
	region := getenv("AWS_REGION")
	if region == "" {
		region = getenv("AWS_DEFAULT_REGION")
	}
	if region == "" {
		return aws.Config{}, errors.New("AWS_REGION is not set")
	}
	cfg := aws.Config{Region: region, RetryMaxAttempts: 2}
	id, key := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" || key == "" {
		return aws.Config{}, errors.New("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set")
	}
	cfg.Credentials = aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, key, getenv("AWS_SESSION_TOKEN")))
	if u := getenv("AWS_ENDPOINT_URL"); u != "" {
		cfg.BaseEndpoint = aws.String(u)
	}
	return cfg, nil
}

func secret(ctx context.Context, sm *secretsmanager.Client, id string) (string, error) {
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", id, err)
	}
	s := aws.ToString(out.SecretString)
	if len(s) < 16 {
		return "", fmt.Errorf("secret %s: want a string of at least 16 bytes", id)
	}
	return s, nil
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

// timed bounds each provider call.
func timed(s api.Sender, d time.Duration) api.Sender { return timeout{s, d} }

type timeout struct {
	api.Sender
	d time.Duration
}

func (t timeout) Send(ctx context.Context, m guard.Message) error {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.Sender.Send(ctx, m)
}
