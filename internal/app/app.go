// Package app is otpguard's one composition root. From typed settings it
// builds store → guard → codes → signer → API, for the local server
// (cmd/otpguard) and for every Lambda function (internal/lambdaapp), so
// what `make run` serves is what Lambda runs. Environment variables are
// read by the callers and passed in.
//
// The App is an http.Handler whose configuration and signing keys can be
// replaced while it serves ([App.Reload]): the store, its connections, the
// in-process backstop and the sender stay.
package app

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/asndb"
	"github.com/otpguard/otpguard/guard/captcha"
	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/guard/token"
	"github.com/otpguard/otpguard/internal/delivery/queue"
)

// Settings is everything the App is built from.
type Settings struct {
	// Redis is the store's client: redisstore.NewClient's, or the
	// embedded server's.
	Redis redis.UniversalClient
	// Secret keys every hash of an identifier or a code (≥ 16 bytes).
	Secret []byte
	// Senders builds the message sender on the host (the store for
	// pacing, the Redis and secret of the delivery queue), or is nil in
	// the functions that send nothing.
	Senders func(queue.Host) (message.Sender, error)
	// Auth fronts login and signup; nil answers them 503.
	Auth api.Authenticator
	// Admin authorizes the internal routes; nil refuses everyone.
	Admin func(*http.Request) bool
	// Health reports whether the store answers; default PING.
	Health func(context.Context) error
	Log    *slog.Logger
	// Observer is told every decision (the EMF metrics), or nil.
	Observer api.Observer
	// PreloadTimeout bounds loading the Redis library at start-up. A
	// Redis that is not there yet is no error: the store loads it on first
	// PreloadTimeout bounds loading the Redis library at start-up. A
	// Redis that is not there yet is no error: the store loads it on first
	// use. Default 2s.
	PreloadTimeout time.Duration
	// CaptchaSecret is challenge.captcha's secret (CAPTCHA_SECRET, or the
	// Secrets Manager secret on AWS); required when the config has one.
	CaptchaSecret string
	// HTTP is the client of outbound calls (the CAPTCHA provider); nil:
	// http.DefaultClient.
	HTTP *http.Client
	// Events receives the security events (EventBridge on AWS, the log
	// locally); nil sends none.
	Events events.Publisher
	// Caller names an internal request's caller (the IAM principal).
	Caller func(*http.Request) string
	// Clock, when set, is the time of the process's own state (deny
	// cache, leases, backstop): the simulator's virtual clock. Default:
	// the process clock, the backstop in the store's time.
	Clock func() time.Time
	// Coalesce, when more than 0, sends the Redis calls of concurrent
	// requests that arrive together as one pipeline, through up to
	// Coalesce batches at once (redisstore.Options.Coalesce): the local
	// server's; a Lambda container serves one request at a time.
	Coalesce int
}

// Keys are the token keys: Signing signs, and the JWKS also serves Others
// (the previous key and a pending one, through a rotation). Without a
// Signing key nothing is signed (see api.Deps.Tokens).
type Keys struct {
	Signing ed25519.PrivateKey
	Others  []ed25519.PublicKey
}

// App is the API, ready to serve.
type App struct {
	s        Settings
	conn     *redisstore.Conn // shared by the store, the codes and the blobs
	store    *redisstore.Store
	backstop *memstore.Store
	clock    *store.Clock
	sender   message.Sender
	server   atomic.Pointer[api.Server]
	guard    atomic.Pointer[guard.Guard]
	// evictionChecked: unix ns of the last maxmemory-policy check.
	evictionChecked atomic.Int64
	config          atomic.Pointer[config.Config]
	stop            context.CancelFunc // the unblock subscription
	asn             *asndb.DB          // network.asnDatabase, opened once per path
}

// New builds the App with a first configuration and keys.
func New(ctx context.Context, s Settings, cfg config.Config, keys Keys) (*App, error) {
	if s.Redis == nil {
		return nil, errors.New("app: no Redis client")
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if s.PreloadTimeout == 0 {
		s.PreloadTimeout = 2 * time.Second
	}
	conn := redisstore.Connect(s.Redis)
	a := &App{s: s, conn: conn, store: redisstore.New(conn, redisstore.Options{Log: s.Log, Coalesce: s.Coalesce}), clock: &store.Clock{}}
	if s.Clock != nil {
		a.backstop = memstore.New(s.Clock)
	} else {
		a.backstop = memstore.New(a.clock.Now)
	}
	if a.s.Health == nil {
		a.s.Health = a.ping
	}
	pctx, cancel := context.WithTimeout(ctx, s.PreloadTimeout)
	defer cancel()
	if err := a.store.Preload(pctx); err != nil {
		s.Log.Warn("redis not reachable at start-up; the store will load its library on first use", "err", err)
	}
	a.checkEviction(pctx)
	if s.Senders != nil {
		var err error
		// the delivery queue's commands join the store's coalesced batches
		// (Coalesce; without it, conn.Batch is a pipeline)
		host := queue.Host{Store: a.store, Redis: s.Redis, Batch: conn.Batch, Secret: s.Secret, Log: s.Log, Void: a.void}
		if a.sender, err = s.Senders(host); err != nil {
			return nil, err
		}
	}
	if err := a.Reload(cfg, keys); err != nil {
		return nil, err
	}
	a.listen()
	return a, nil
}

// Reload replaces the configuration and keys. On an error the App keeps
// serving what it had.
func (a *App) Reload(cfg config.Config, keys Keys) error {
	opts := guard.Options{Secret: a.s.Secret, Backstop: a.backstop, StoreClock: a.clock, Clock: a.s.Clock, Unblocked: a.unblocked}
	if path := cfg.Network.ASNDatabase; path != "" {
		if a.asn == nil || a.asn.Path() != path {
			db, err := asndb.Open(path)
			if err != nil {
				return fmt.Errorf("config: network.asnDatabase: %w", err)
			}
			a.asn = db // the one it replaces stays mapped: a request may still use it (a new path is rare)
		}
		opts.Networks = a.asn
	}
	g, err := guard.New(cfg.Engine(), a.store, opts)
	if err != nil {
		return err
	}
	codes, err := otp.New(cfg, redisstore.NewCodes(a.conn), a.s.Secret)
	if err != nil {
		return err
	}
	var signer *token.Signer // none where no key is given: the function signs nothing
	if keys.Signing != nil {
		if signer, err = token.NewSigner(keys.Signing, cfg.Token.Issuer, cfg.Token.TTL, keys.Others...); err != nil {
			return err
		}
	}
	var verifier api.Captcha
	if cp := cfg.Challenge.Captcha; cp != nil {
		v, err := captcha.New(*cp, a.s.CaptchaSecret, a.s.HTTP)
		if err != nil {
			return err
		}
		verifier = v
	}
	srv, err := api.NewServer(api.Deps{
		Config: cfg, Guard: g, Codes: codes, Tokens: signer, Sender: a.sender, Auth: a.s.Auth, Admin: a.s.Admin,
		Health: a.s.Health, Log: a.s.Log, Observer: a.s.Observer, Blobs: redisstore.NewBlobs(a.conn), Captcha: verifier,
		Events: a.s.Events, Caller: a.s.Caller,
	})
	if err != nil {
		return err
	}
	a.server.Store(srv)
	a.guard.Store(g)
	a.config.Store(&cfg)
	return nil
}

// void settles a send's receipt as a void attempt (a queued message
// given up on).
func (a *App) void(ctx context.Context, receipt string) error {
	return a.guard.Load().SettleReceipt(ctx, receipt, guard.Void)
}

// unblocked tells the other processes on the Redis what an unblock here
// cleared; they forget their copies of it (see listen).
func (a *App) unblocked(ctx context.Context, states []guard.State) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := redisstore.PublishUnblocked(ctx, a.s.Redis, states); err != nil {
		a.s.Log.WarnContext(ctx, "the other processes were not told of an unblock; their copies end within store.denyCache.ttl", "err", err)
	}
}

// listen makes the guard in force forget what other processes unblock,
// until Close.
func (a *App) listen() {
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	redisstore.SubscribeUnblocked(ctx, a.s.Redis, a.s.Log,
		func(states []guard.State) { a.guard.Load().Forget(states) },
		func() {
			if g := a.guard.Load(); g != nil {
				g.ForgetAll()
			}
		})
}

// Close stops what the App runs in the background. The Redis client is
// the caller's.
func (a *App) Close() {
	if a.stop != nil {
		a.stop()
	}
}

// ServeHTTP implements http.Handler.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.server.Load().ServeHTTP(w, r) }

// Guard returns the guard in force (for an administrator's reads).
func (a *App) Guard() *guard.Guard { return a.guard.Load() }

// Server is the API in force (the Cognito triggers call its methods).
func (a *App) Server() *api.Server { return a.server.Load() }

// Config returns the configuration in force.
func (a *App) Config() config.Config { return *a.config.Load() }

// Store returns the Redis store (pacers share it).
func (a *App) Store() *redisstore.Store { return a.store }

func (a *App) ping(ctx context.Context) error {
	if err := a.s.Redis.Ping(ctx).Err(); err != nil {
		return err
	}
	if last := a.evictionChecked.Load(); time.Since(time.Unix(0, last)) > 5*time.Minute {
		a.checkEviction(ctx)
	}
	return nil
}

// checkEviction reads Redis's maxmemory-policy and warns when it may
// evict live counters: an allkeys-* policy drops keys that have no TTL
// pressure at all, and a limit silently starts afresh. Safe: noeviction
// (writes fail when memory is full: the guard answers as on an outage),
// volatile-* (every otpguard key has a TTL, so these evict them too, but
// only under memory pressure, oldest or soonest-expiring first).
// ElastiCache Serverless refuses CONFIG: nothing is known, nothing said.
func (a *App) checkEviction(ctx context.Context) {
	a.evictionChecked.Store(time.Now().UnixNano())
	v, err := a.s.Redis.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return
	}
	if p := v["maxmemory-policy"]; strings.HasPrefix(p, "allkeys-") {
		a.s.Log.Warn("redis maxmemory-policy may evict live counters: limits would silently reset under memory pressure; use noeviction (or volatile-ttl)",
			"maxmemory-policy", p)
	}
}
