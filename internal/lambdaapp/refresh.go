package lambdaapp

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/emf"
	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/guard/token"
	"github.com/otpguard/otpguard/internal/app"
)

// schedule is when a refresh is due: every period, jittered, backing off
// on failures.
type schedule struct {
	every   time.Duration
	next    atomic.Int64 // unix ns
	running atomic.Bool
	fails   int // touched by the one running refresh only
}

const maxBackoff = 15 * time.Minute

// due reports whether the refresh is due and, if so, takes it (the
// caller must call done).
func (s *schedule) due() bool {
	return time.Now().UnixNano() >= s.next.Load() && s.running.CompareAndSwap(false, true)
}

// done sets the next time: every (doubled per failure in a row, up to
// maxBackoff), plus 0–50% jitter, so containers started together spread
// their reads.
func (s *schedule) done(ok bool) {
	if ok {
		s.fails = 0
	} else if s.fails < 16 {
		s.fails++
	}
	pause := min(s.every<<s.fails, maxBackoff)
	pause += time.Duration(mrand.Int64N(int64(pause)/2 + 1))
	s.next.Store(time.Now().Add(pause).UnixNano())
	s.running.Store(false)
}

// runtime is the function's handler: the App, refreshed in place.
type runtime struct {
	fn       Function
	env      Env
	log      *slog.Logger
	metrics  *emf.Observer
	app      *app.App
	shared   *sharedConfig
	keys     *signingKeys // nil: the function neither signs nor publishes keys
	trigger  TriggerFunc  // the Cognito triggers' handler (see TriggerHandler)
	cfgSched schedule
	keySched schedule

	mu      sync.Mutex // guards doc, keyIDs, keysNow and the reloads
	doc     string     // the config document in force
	keyIDs  string     // the secret versions of the keys in force
	keysNow app.Keys   // the keys in force
}

func (rt *runtime) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rt.cfgSched.due() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rt.cfgSched.done(rt.refreshConfig(ctx))
		}()
	}
	if rt.keys != nil && rt.keySched.due() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rt.keySched.done(rt.refreshKeys(ctx))
		}()
	}
	if rt.trigger != nil && r.URL.Path == triggerPath {
		rt.serveTrigger(w, r)
		return
	}
	rt.app.ServeHTTP(w, r)
}

// refreshConfig reads the document again and reloads it when it changed.
// A document that does not parse or validate is rejected: the last good
// one stays.
func (rt *runtime) refreshConfig(ctx context.Context) bool {
	cfg, doc, err := rt.config(ctx)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err != nil {
		rt.log.ErrorContext(ctx, "config refresh rejected; the last good config stays", "err", err)
		rt.metrics.Count(ctx, "ConfigRejected")
		if !isUnreadable(err) {
			rt.configEvent(ctx, doc, cfg, err)
		}
		return !isUnreadable(err)
	}
	if doc == rt.doc {
		return true
	}
	if err := rt.app.Reload(cfg, rt.keysNow); err != nil {
		rt.log.ErrorContext(ctx, "config refresh rejected; the last good config stays", "err", err)
		rt.metrics.Count(ctx, "ConfigRejected")
		rt.configEvent(ctx, doc, cfg, err)
		return true
	}
	rt.configEvent(ctx, doc, cfg, nil)
	rt.doc = doc
	rt.log.InfoContext(ctx, "config refreshed", "config", docID(doc))
	return true
}

// refreshKeys reads the signing key's versions again and reloads the
// keys when one changed.
func (rt *runtime) refreshKeys(ctx context.Context) bool {
	keys, ids, err := rt.keys.load(ctx)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err != nil {
		rt.log.ErrorContext(ctx, "signing key refresh failed; the keys in force stay", "err", err)
		rt.metrics.Count(ctx, "ConfigRejected")
		return false
	}
	if ids == rt.keyIDs {
		return true
	}
	if err := rt.app.Reload(rt.app.Config(), keys); err != nil {
		rt.log.ErrorContext(ctx, "signing key refresh rejected; the keys in force stay", "err", err)
		rt.metrics.Count(ctx, "ConfigRejected")
		return true
	}
	rt.keyIDs, rt.keysNow = ids, keys
	rt.log.InfoContext(ctx, "signing keys refreshed", "keys", ids)
	return true
}

// errUnreadable marks a config that could not be read (as opposed to a
// document that is wrong): the schedule backs off.
var errUnreadable = errors.New("unreadable")

func isUnreadable(err error) bool { return errors.Is(err, errUnreadable) }

// config reads the config document (see sharedConfig): a parameter that
// does not exist (the stack never creates it, so an update never resets
// it) means defaults.
func (rt *runtime) config(ctx context.Context) (config.Config, string, error) {
	if rt.env.ConfigParam == "" {
		return config.Default(), "", nil
	}
	doc, found, err := rt.shared.read(ctx)
	if err != nil {
		return config.Config{}, "", fmt.Errorf("config parameter %s: %w: %w", rt.env.ConfigParam, errUnreadable, err)
	}
	if !found {
		rt.log.WarnContext(ctx, "the config parameter does not exist; the defaults apply", "parameter", rt.env.ConfigParam)
	}
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		return config.Config{}, doc, fmt.Errorf("config parameter %s: %w", rt.env.ConfigParam, err)
	}
	return cfg, doc, nil
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

// configEvent publishes Config Applied (err nil) or Config Rejected for a
// document, once per document and stack a day (every container reads
// it; the mark in Redis lets one event through).
func (rt *runtime) configEvent(ctx context.Context, doc string, cfg config.Config, err error) {
	e := events.Event{DetailType: events.ConfigApplied, Detail: map[string]any{"config": docID(doc), "rules": len(cfg.Rules)}}
	if err != nil {
		reason := err.Error()
		if len(reason) > 1000 {
			reason = reason[:1000]
		}
		e = events.Event{DetailType: events.ConfigRejected, Detail: map[string]any{"config": docID(doc), "reason": reason}}
	}
	rt.app.Server().Publish(ctx, e, docID(doc), 24*time.Hour)
}
