// Command otpguard runs the whole otpguard API as one local HTTP server:
// the guard on an embedded Redis (or REDIS_URL), configured by
// GUARD_CONFIG, with the local outbox instead of SES and SNS.
//
// Environment:
//
//	GUARD_ADDR         listen address (default 127.0.0.1:8080)
//	REDIS_URL          redis:// or rediss:// URL, or a comma-separated list
//	                   of cluster nodes; unset: an embedded in-process Redis
//	GUARD_CONFIG       path of a YAML config laid over the default
//	OUTBOX_PATH        file the outbox appends messages to; unset: stderr
//	DELIVERY_MODE      queue (default: messages wait in an in-process
//	                   queue and go out in the background) or direct (in
//	                   the request)
//	DELIVERY_QUEUE_MAX_DEPTH  messages waiting above which a send is
//	                   refused 503 with Retry-After (default 6000)
//	GUARD_SECRET       key-hashing secret (at least 16 bytes); required
//	                   with REDIS_URL, else random per start
//	GUARD_SIGNING_KEY  Ed25519 token key (PKCS #8 PEM or base64 seed);
//	                   required with REDIS_URL, else ephemeral
//	ADMIN_TOKEN        bearer token of the internal routes; unset: they
//	                   answer 401 to everyone
//	AUTH               local (default), cognito or http: see authenv.Authenticator
//	CAPTCHA_SECRET     the secret of challenge.captcha's provider (siteverify)
//	GUARD_DEBUG_ADDR   optional second listener (e.g. 127.0.0.1:6060) for
//	                   /debug/vars (expvar: memstats, goroutines) and
//	                   /debug/pprof/; keep it on loopback
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/outbox"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/token"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/authenv"
	"github.com/otpguard/otpguard/internal/console"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/localredis"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "console" {
		if err := runConsole(ctx, os.Args[2:], os.Getenv, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "otpguard console:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "otpguard:", err)
		os.Exit(1)
	}
}

// run is the whole program, so tests run it as it is.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	app.LogRedis(log)
	cfgPath := getenv("GUARD_CONFIG")
	cfg, doc, err := loadConfig(cfgPath)
	if err != nil {
		return err
	}
	secret, key, err := secrets(getenv)
	if err != nil {
		return err
	}

	rdb, stopLocal, err := openRedis(getenv, log)
	if err != nil {
		return err
	}
	defer stopLocal()
	defer rdb.Close()

	auth, closeAuth, err := authenv.Authenticator(getenv, true, nil)
	if err != nil {
		return err
	}
	defer closeAuth()
	box, closeBox, err := openOutbox(getenv, stderr)
	if err != nil {
		return err
	}
	defer closeBox()
	senders, err := deliverySenders(ctx, getenv, box)
	if err != nil {
		return err
	}
	tokens := console.Tokens{Admin: getenv("ADMIN_TOKEN"), Viewer: getenv("VIEWER_TOKEN")}
	stats := console.NewStats()
	handler, err := app.New(ctx, app.Settings{
		Redis: rdb, Secret: secret, Auth: auth, Log: log, CaptchaSecret: getenv("CAPTCHA_SECRET"),
		// ADMIN_TOKEN may use every internal route; VIEWER_TOKEN may read
		// (GET) only: the console's read-only operators
		Admin: func(r *http.Request) bool {
			a := tokens.Of(r)
			return a.Write || (a.Read && r.Method == http.MethodGet)
		},
		Observer: statsObserver{stats},
		Events:   events.Log{Logger: log, Stack: "local"},
		Senders:  senders,
		// concurrent requests' Redis calls as pipelines, a batch per core
		Coalesce: runtime.GOMAXPROCS(0),
	}, cfg, app.Keys{Signing: key})
	if err != nil {
		return err
	}
	defer handler.Close()
	return serveApp(ctx, getenv, stdout, log, handler, tokens, stats, cfgPath, doc, key)
}

// serveApp serves handler and the console beside it until ctx ends,
// with the config file at cfgPath (its text doc) watched and applied.
func serveApp(ctx context.Context, getenv func(string) string, stdout io.Writer, log *slog.Logger, handler *app.App,
	tokens console.Tokens, stats *console.Stats, cfgPath, doc string, key ed25519.PrivateKey) error {
	file := console.NewConfigFile(cfgPath, doc, func(c config.Config) error { return handler.Reload(c, app.Keys{Signing: key}) })
	file.Applied = configApplied(handler, log)
	go watchConfig(ctx, file, handler, log)
	// The console's routes beside the API's; every other path (unclean
	// ones included: the API answers them 404, never a redirect) is the
	// API's.
	consoleRoutes := console.Routes(tokens, file, stats, func() []guard.Rule { return handler.Config().Rules })
	mux := withConsole(consoleRoutes, handler)

	addr := getenv("GUARD_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := newServer(mux, log)
	if err := startDebug(getenv, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "otpguard listening on http://%s\n", ln.Addr())
	return serve(ctx, srv, problemListener{ln})
}

// openOutbox is the writer the outbox appends messages to: the file
// OUTBOX_PATH or, unset, stderr; done closes the file (a no-op for
// stderr).
func openOutbox(getenv func(string) string, stderr io.Writer) (box io.Writer, done func(), err error) {
	box, done = stderr, func() {}
	if path := getenv("OUTBOX_PATH"); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("OUTBOX_PATH: %w", err)
		}
		done = func() { f.Close() }
		box = f
	}
	return box, done, nil
}

// openRedis is the client of REDIS_URL or, unset, of an embedded
// in-process Redis; stop closes the embedded server (a no-op otherwise).
func openRedis(getenv func(string) string, log *slog.Logger) (rdb redis.UniversalClient, stop func(), err error) {
	stop = func() {}
	if url := getenv("REDIS_URL"); url != "" {
		if rdb, err = redisstore.NewClient(url); err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
		}
	} else {
		srv, err := localredis.Start()
		if err != nil {
			return nil, nil, err
		}
		srv.RealTime() // windows kept in keys with a TTL end
		stop = func() { srv.Close() }
		rdb = srv.Client()
		log.Info("using an embedded in-process Redis and ephemeral secrets; set REDIS_URL, GUARD_SECRET and GUARD_SIGNING_KEY for a shared one")
	}
	return rdb, stop, nil
}

// deliverySenders is how codes go out to box, by DELIVERY_MODE: through
// an in-process queue (of at most DELIVERY_QUEUE_MAX_DEPTH messages),
// closed when ctx is, or directly in the request.
func deliverySenders(ctx context.Context, getenv func(string) string, box io.Writer) (func(queue.Host) (message.Sender, error), error) {
	var maxDepth int64 // 0: the queue's default
	if v := getenv("DELIVERY_QUEUE_MAX_DEPTH"); v != "" {
		if _, err := fmt.Sscan(v, &maxDepth); err != nil || maxDepth < 1 {
			return nil, fmt.Errorf("DELIVERY_QUEUE_MAX_DEPTH: want a whole number ≥ 1, got %q", v)
		}
	}
	var senders func(queue.Host) (message.Sender, error)
	switch mode := getenv("DELIVERY_MODE"); mode {
	case "direct":
		senders = func(queue.Host) (message.Sender, error) { return outbox.New(box, nil), nil }
	case "", "queue":
		senders = func(h queue.Host) (message.Sender, error) {
			q, local, err := queue.InProcess(h, outbox.New(box, nil), 8, queue.Options{MaxDepth: maxDepth})
			if err != nil {
				return nil, err
			}
			go func() { <-ctx.Done(); local.Close() }()
			return q, nil
		}
	default:
		return nil, fmt.Errorf("DELIVERY_MODE: want queue or direct, got %q", mode)
	}
	return senders, nil
}

// withConsole sends the console's clean paths to consoleRoutes and every
// other to handler.
func withConsole(consoleRoutes, handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; strings.HasPrefix(p, "/v1/console/") && path.Clean(p) == p {
			consoleRoutes.ServeHTTP(w, r)
			return
		}
		handler.ServeHTTP(w, r)
	})
}

// newServer is the API's HTTP server.
// The headers must arrive within 5s; a body within api.BodyTimeout of
// its handler starting to read it (a 408 problem, not a silent
// close); ReadTimeout and WriteTimeout bound the rest. OPTIONS * is no
// route of ours: a 404 problem, like any unclean path.
func newServer(mux http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: 20 * time.Second, MaxHeaderBytes: 16 << 10, DisableGeneralOptionsHandler: true,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// startDebug opens GUARD_DEBUG_ADDR's listener, if set, for /debug/vars
// and /debug/pprof/.
func startDebug(getenv func(string) string, stdout io.Writer) error {
	if d := getenv("GUARD_DEBUG_ADDR"); d != "" {
		dl, err := net.Listen("tcp", d)
		if err != nil {
			return fmt.Errorf("GUARD_DEBUG_ADDR: %w", err)
		}
		fmt.Fprintf(stdout, "otpguard debug on http://%s/debug/vars\n", dl.Addr())
		go func() { _ = http.Serve(dl, debugHandler()) }()
	}
	return nil
}

// serve runs srv on ln until ctx ends, then shuts it down gracefully
// (within 5s).
func serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// secrets reads GUARD_SECRET and GUARD_SIGNING_KEY. Instances that share a
// Redis must share both, or each would count apart (limits split), codes
// sent through one would fail on another, and a restart would reset every
// counter: with REDIS_URL set, both are required. Only the embedded Redis,
// which lives and dies with this process, runs on ephemeral ones.
func secrets(getenv func(string) string) ([]byte, ed25519.PrivateKey, error) {
	shared := getenv("REDIS_URL") != ""
	secret := []byte(getenv("GUARD_SECRET"))
	switch {
	case len(secret) == 0 && shared:
		return nil, nil, errors.New("GUARD_SECRET is required with REDIS_URL: every instance on one Redis must share it (at least 16 bytes, e.g. `openssl rand -base64 32`)")
	case len(secret) == 0:
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	case len(secret) < 16:
		return nil, nil, errors.New("GUARD_SECRET must be at least 16 bytes")
	}
	s := getenv("GUARD_SIGNING_KEY")
	switch {
	case s == "" && shared:
		return nil, nil, errors.New("GUARD_SIGNING_KEY is required with REDIS_URL: every instance on one Redis must sign with one key (`openssl genpkey -algorithm ed25519`)")
	case s == "":
		return secret, token.Generate(), nil
	}
	key, err := token.ParseKey(s)
	if err != nil {
		return nil, nil, fmt.Errorf("GUARD_SIGNING_KEY: %w", err)
	}
	return secret, key, nil
}

func loadConfig(path string) (config.Config, string, error) {
	if path == "" {
		return config.Default(), string(config.DefaultYAML()), nil
	}
	doc, err := readConfig(path)
	if err != nil {
		return config.Config{}, "", fmt.Errorf("GUARD_CONFIG: %w", err)
	}
	cfg, err := config.Parse(doc)
	if err != nil {
		return config.Config{}, "", fmt.Errorf("GUARD_CONFIG %s: %w", path, err)
	}
	return cfg, string(doc), nil
}

// readConfig reads the GUARD_CONFIG file, never more than one byte over
// config.MaxConfigBytes, whatever the path names (a huge file, a device):
// a longer one is a config.LimitError naming the bound (with its first
// bytes, by which the watcher knows it again).
func readConfig(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, config.MaxConfigBytes+1))
	if err != nil || len(b) <= config.MaxConfigBytes {
		return b, err
	}
	size := len(b)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = int(fi.Size())
	}
	return b, &config.LimitError{Bound: "MaxConfigBytes", Limit: config.MaxConfigBytes, Got: size}
}
