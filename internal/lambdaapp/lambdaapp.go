// Package lambdaapp is a Lambda function's init, once per container: the
// typed environment, the secrets the function needs (and only those),
// the config document, the Redis client, the senders or the
// authenticator, then the App of internal/app behind the API Gateway
// adapter. Warm invocations reuse all of it.
//
// A function never crash-loops. When a dependency cannot be reached or
// read at init (a secret, the config parameter, the environment), the
// reason is logged and the function answers 503 not_ready (naming the
// dependency, never its address or the error) while it tries again on
// later invocations with a growing pause; the first try that succeeds
// serves that invocation. An exit would make Lambda start a new
// container, and hammer the dependency, on every request.
//
// The config document and the signing key are read again in place, on
// the invocation that finds them due and without holding it: the
// document every CONFIG_REFRESH (default 1m), shared through Redis so
// that one container per stack reads SSM per period whatever the
// concurrency (config.go); the signing key's versions every KEY_REFRESH
// (default 5m), by the functions that sign or publish keys only. Each
// schedule is jittered (+0–50%) and backs off on failures (doubling, up
// to 15 minutes). A new document takes effect on that container's next
// invocations; a bad one is rejected (logged, and counted as the
// ConfigRejected metric) and the last good one stays.
package lambdaapp

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/emf"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/apigw"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/awsjson"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/eventbus"
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
	// Hashes: the function keys identifiers and codes (every guarded
	// route): it reads the key-hashing secret.
	Hashes bool
	// Signs: the function signs tokens (verify) or publishes their public
	// keys (jwks): it alone reads the signing secret.
	Signs bool
	// Captcha: the function may ask for a CAPTCHA (a challenged send or
	// signup): it reads the provider's secret, when the stack has one.
	Captcha bool
	// Trigger: the function is a Cognito user pool's triggers (docs/contract.md
	// §10): its events are Cognito's, not the HTTP API's.
	Trigger bool
	// KMS: the function decrypts the custom senders' codes with the
	// stack's KMS key.
	KMS bool
	// Queue: the function is the delivery queue's consumer (its events
	// are SQS's, answered through Parts.Trigger like a trigger's): it
	// sends with the direct senders and never queues.
	Queue bool
}

// Parts are the pieces only some functions link, passed in by their main
// package so that the others' binaries do not carry them: the SES and SNS
// clients (internal/delivery), the authenticators (internal/authenv).
type Parts struct {
	// Senders builds the senders from the environment (send).
	Senders func(getenv func(string) string, cfg aws.Config) (func(queue.Host) (message.Sender, error), error)
	// Auth builds the authenticator AUTH names (login, signup); allowLocal
	// is false in Lambda.
	Auth func(getenv func(string) string, allowLocal bool, clientSecret func() (string, error)) (api.Authenticator, func() error, error)
	// Trigger builds the Cognito triggers' handler (internal/triggers) on
	// the API in force.
	// rdb is the function's Redis client (the triggers keep sign-ins
	// between PreAuthentication and PostAuthentication, and retry marks).
	Trigger func(getenv func(string) string, cfg aws.Config, rdb redis.UniversalClient, server func() *api.Server, log *slog.Logger) (TriggerFunc, error)
}

// TriggerFunc answers one Cognito trigger event.
type TriggerFunc = func(ctx context.Context, event json.RawMessage) (json.RawMessage, error)

// Senders selects the delivery channels a function may use.
type Senders int

// The channels.
const (
	Email Senders = 1 << iota
	SMS
)

// The functions of template.yaml.
var (
	Send   = Function{Name: "send", Senders: Email | SMS, Hashes: true, Captcha: true}
	Verify = Function{Name: "verify", Hashes: true, Signs: true}
	Jwks   = Function{Name: "jwks", Signs: true}
	Health = Function{Name: "health"}
	// login sends the step-up codes of challenged logins (docs/contract.md §6)
	Login   = Function{Name: "login", Auth: true, Hashes: true, Senders: Email | SMS}
	Signup  = Function{Name: "signup", Auth: true, Hashes: true, Captcha: true}
	Backend = Function{Name: "backend", Internal: true, Hashes: true}
	// Cognitosend is the user pool's custom SMS and email senders.
	Cognitosend = Function{Name: "cognitosend", Senders: Email | SMS, Hashes: true, Trigger: true, KMS: true}
	// Cognitoauth is its pre sign-up, pre and post authentication and
	// post confirmation triggers.
	Cognitoauth = Function{Name: "cognitoauth", Hashes: true, Trigger: true}
	// Deliver sends what the others queued (DeliveryMode queue).
	Deliver = Function{Name: "deliver", Senders: Email | SMS, Hashes: true, Queue: true}
)

// Functions lists them all.
var Functions = []Function{Send, Verify, Jwks, Health, Login, Signup, Backend, Cognitosend, Cognitoauth, Deliver}

// Main initializes fn and serves its invocations; see Start.
func Main(fn Function, p Parts) {
	h := Start(context.Background(), fn, p, os.Getenv, os.Stdout, os.Stderr)
	if fn.Trigger || fn.Queue {
		lambda.Start(TriggerHandler(h))
		return
	}
	lambda.Start(apigw.Handler(h))
}

// Start is Init that never gives up: when Init fails, the failure is
// logged and the handler answers 503 not_ready with its reason, trying
// Init again on later invocations (see notReady).
func Start(ctx context.Context, fn Function, p Parts, getenv func(string) string, stdout, stderr io.Writer) http.Handler {
	h, err := Init(ctx, fn, p, getenv, stdout, stderr)
	if err == nil {
		return h
	}
	return newNotReady(err, slog.New(slog.NewJSONHandler(stderr, nil)), emf.New(stdout, nil, getenv("STACK_NAME")),
		func(ctx context.Context) (http.Handler, error) { return Init(ctx, fn, p, getenv, stdout, stderr) })
}

// initError is an init failure with the dependency it concerns, in words
// a 503 may say.
type initError struct {
	what string
	err  error
}

func (e *initError) Error() string { return e.what + ": " + e.err.Error() }
func (e *initError) Unwrap() error { return e.err }

func failed(what string, err error) error {
	if err == nil {
		return nil
	}
	return &initError{what, err}
}

// Init builds a function's handler: everything a container keeps.
func Init(ctx context.Context, fn Function, p Parts, getenv func(string) string, stdout, stderr io.Writer) (http.Handler, error) {
	// Lambda's init phase may last 10s: leave room to answer.
	ctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	app.LogRedis(log)
	env, err := FromEnv(fn, getenv)
	if err != nil {
		return nil, failed("the environment", err)
	}
	awsCfg := awsjson.Config(getenv, env.Region)
	sm, ssm := newSecrets(awsCfg), newParameters(awsCfg)
	rt := &runtime{fn: fn, env: env, log: log, metrics: emf.New(stdout, nil, env.Stack)}
	rt.cfgSched.every, rt.keySched.every = env.Refresh, env.KeyRefresh

	hash, redisURL, keys, keyIDs, err := rt.readSecrets(ctx, sm)
	if err != nil {
		return nil, err
	}
	rdb, err := redisstore.NewClient(redisURL)
	if err != nil {
		return nil, failed("the environment", fmt.Errorf("REDIS_URL: %w", err))
	}
	rt.shared = newSharedConfig(rdb, env.ConfigParam, ssm, env.Refresh, log)
	cfg, doc, err := rt.config(ctx)
	if err != nil {
		rdb.Close()
		return nil, failed("the config parameter", err)
	}
	rt.doc, rt.keyIDs, rt.keysNow = doc, keyIDs, keys

	s := app.Settings{Redis: rdb, Secret: hash, Log: log, Observer: rt.metrics}
	if bus := getenv("EVENT_BUS_NAME"); bus != "" {
		s.Events = eventbus.New(awsCfg, bus, env.Stack)
	}
	if err := rt.addParts(ctx, p, getenv, awsCfg, sm, rdb, &s); err != nil {
		return nil, err
	}
	if rt.app, err = app.New(ctx, s, cfg, keys); err != nil {
		return nil, err
	}
	rt.cfgSched.done(true)
	rt.keySched.done(true)
	rt.configEvent(ctx, doc, cfg, nil)
	return rt, nil
}

// readSecrets reads the secrets the function needs: the key-hashing
// secret, the signing key, the Redis password (into the Redis URL).
func (rt *runtime) readSecrets(ctx context.Context, sm *secrets) (hash []byte, redisURL string, keys app.Keys, keyIDs string, err error) {
	fn, env, log := rt.fn, rt.env, rt.log
	// The secrets are independent: read side by side, init waits for the
	// slowest rather than for their sum.
	hash, redisURL = make([]byte, 32), env.RedisURL
	var (
		errs [3]error
		wg   sync.WaitGroup
	)
	if fn.Hashes {
		wg.Go(func() {
			var h string
			if h, errs[0] = sm.get(ctx, env.HashSecretID, ""); errs[0] == nil && len(h) < 16 {
				errs[0] = errors.New("want a string of at least 16 bytes")
			}
			hash, errs[0] = []byte(h), failed("the key-hashing secret", errs[0])
		})
	} else {
		// It hashes nothing: a key of its own, never stored.
		_, _ = rand.Read(hash)
	}
	if fn.Signs {
		rt.keys = &signingKeys{sm: sm, id: env.SigningSecretID, log: log}
		wg.Go(func() {
			keys, keyIDs, errs[1] = rt.keys.load(ctx)
			errs[1] = failed("the signing key", errs[1])
		})
	}
	if env.RedisSecretID != "" {
		wg.Go(func() {
			var pass string
			if pass, errs[2] = sm.get(ctx, env.RedisSecretID, ""); errs[2] != nil {
				errs[2] = failed("the Redis password", errs[2])
				return
			}
			if redisURL, errs[2] = withPassword(redisURL, pass); errs[2] != nil {
				errs[2] = failed("the environment", fmt.Errorf("REDIS_URL: %w", errs[2]))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return hash, redisURL, keys, keyIDs, firstInit(errs[:], err)
	}
	return hash, redisURL, keys, keyIDs, nil
}

// addParts completes the app's settings with the parts this function
// uses: the CAPTCHA secret, the senders, the authenticator, the
// triggers' handler, the internal API's caller.
func (rt *runtime) addParts(ctx context.Context, p Parts, getenv func(string) string, awsCfg aws.Config, sm *secrets, rdb redis.UniversalClient, s *app.Settings) error {
	fn, log := rt.fn, rt.log
	var err error
	if id := getenv("CAPTCHA_SECRET_ID"); fn.Captcha && id != "" {
		if s.CaptchaSecret, err = sm.get(ctx, id, ""); err != nil {
			return failed("the CAPTCHA secret", err)
		}
	}
	if fn.Senders != 0 {
		if p.Senders == nil {
			return fmt.Errorf("function %s delivers codes but was built without senders", fn.Name)
		}
		senv := getenv
		if fn.Queue { // the consumer sends: it never queues again
			senv = func(k string) string {
				if k == "DELIVERY_MODE" {
					return "direct"
				}
				return getenv(k)
			}
		}
		if s.Senders, err = p.Senders(senv, awsCfg); err != nil {
			return failed("the senders' settings", err)
		}
	}
	if fn.Auth {
		if p.Auth == nil {
			return fmt.Errorf("function %s fronts the authenticator but was built without one", fn.Name)
		}
		var clientSecret func() (string, error)
		if id := getenv("COGNITO_CLIENT_SECRET_ID"); id != "" {
			clientSecret = func() (string, error) { return sm.get(ctx, id, "") }
		}
		if s.Auth, _, err = p.Auth(getenv, false, clientSecret); err != nil {
			return failed("the authenticator's settings", err)
		}
	}
	if fn.Trigger || fn.Queue {
		if p.Trigger == nil {
			return fmt.Errorf("function %s answers events but was built without their handler", fn.Name)
		}
		if rt.trigger, err = p.Trigger(getenv, awsCfg, rdb, func() *api.Server { return rt.app.Server() }, log); err != nil {
			return failed("the triggers' settings", err)
		}
	}
	if fn.Internal {
		// The gateway's IAM authorizer checked the SigV4 signature; a
		// request without its verdict did not come through it.
		s.Admin = func(r *http.Request) bool { return apigw.IAMCaller(r.Context()) != "" }
		s.Caller = func(r *http.Request) string { return apigw.IAMCaller(r.Context()) }
	}
	return nil
}

// firstInit is the first dependency's error of init's parallel reads (the
// one a 503 names), with all of them logged by the caller.
func firstInit(errs []error, all error) error {
	for _, e := range errs {
		var ie *initError
		if errors.As(e, &ie) {
			return &initError{ie.what, all}
		}
	}
	return all
}
