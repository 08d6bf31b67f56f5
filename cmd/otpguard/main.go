// Command otpguard runs otpguard as one local HTTP server: the guard on an
// embedded Redis (or REDIS_URL), configured by GUARD_CONFIG.
//
// Environment:
//
//	GUARD_ADDR    listen address (default 127.0.0.1:8080)
//	REDIS_URL     redis:// or rediss:// URL, or a comma-separated list of
//	              cluster nodes; unset: an embedded in-process Redis
//	GUARD_CONFIG  path of a YAML config laid over the default
//	GUARD_SECRET  key-hashing secret (at least 16 bytes); unset: a random
//	              one per start, so counters in a real Redis start afresh
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
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
	"github.com/otpguard/otpguard/guard/redisstore"
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
	if _, err := guard.New(cfg, store, guard.Options{Secret: secret, Backstop: backstop}); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), cfg.Store.Timeout)
		defer cancel()
		if err := rdb.Ping(ctx).Err(); err != nil {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Service Unavailable",
				"status": 503, "detail": "the store does not answer", "code": "store_unavailable"})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})

	addr := getenv("GUARD_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
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
