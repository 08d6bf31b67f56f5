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
//	GUARD_SECRET       key-hashing secret (at least 16 bytes); unset: a
//	                   random one per start, so counters start afresh
//	GUARD_SIGNING_KEY  Ed25519 token key (PKCS #8 PEM or base64 seed);
//	                   unset: an ephemeral key per start
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/outbox"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/token"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "otpguard:", err)
		os.Exit(1)
	}
}

// run is the whole program, so tests run it as it is.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	cfg, err := loadConfig(getenv("GUARD_CONFIG"))
	if err != nil {
		return err
	}
	secret := []byte(getenv("GUARD_SECRET"))
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}

	var rdb redis.UniversalClient
	if url := getenv("REDIS_URL"); url != "" {
		if rdb, err = redisstore.NewClient(url); err != nil {
			return err
		}
	} else {
		mem, err := redisstore.NewMemory()
		if err != nil {
			return err
		}
		defer mem.Close()
		rdb = mem.Client()
		log.Info("using an embedded in-process Redis; set REDIS_URL for a real one")
	}
	defer rdb.Close()
	store := redisstore.New(rdb)
	if err := store.Preload(ctx); err != nil {
		log.Warn("redis not reachable at start-up; will retry per request", "err", err)
	}
	backstop, err := redisstore.NewMemory()
	if err != nil {
		return err
	}
	defer backstop.Close()
	g, err := guard.New(cfg, store, guard.Options{Secret: secret, Backstop: backstop})
	if err != nil {
		return err
	}
	codes, err := otp.New(cfg, redisstore.NewCodes(rdb), secret)
	if err != nil {
		return err
	}
	key := token.Generate()
	if s := getenv("GUARD_SIGNING_KEY"); s != "" {
		if key, err = token.ParseKey(s); err != nil {
			return fmt.Errorf("GUARD_SIGNING_KEY: %w", err)
		}
	}
	tokens, err := token.NewSigner(key, cfg.Token.Issuer, cfg.Token.TTL)
	if err != nil {
		return err
	}
	var box io.Writer = stderr
	if path := getenv("OUTBOX_PATH"); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("OUTBOX_PATH: %w", err)
		}
		defer f.Close()
		box = f
	}
	handler, err := api.NewServer(api.Deps{
		Config: cfg, Guard: g, Codes: codes, Tokens: tokens, Sender: outbox.New(box, nil), Log: log,
		Health: func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
	})
	if err != nil {
		return err
	}

	addr := getenv("GUARD_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "otpguard listening on http://%s\n", ln.Addr())
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

func loadConfig(path string) (guard.Config, error) {
	if path == "" {
		return guard.DefaultConfig(), nil
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		return guard.Config{}, fmt.Errorf("GUARD_CONFIG: %w", err)
	}
	cfg, err := guard.ParseConfig(doc)
	if err != nil {
		return guard.Config{}, fmt.Errorf("GUARD_CONFIG %s: %w", path, err)
	}
	return cfg, nil
}
