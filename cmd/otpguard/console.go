package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/emf"
	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/console"
)

// runConsole is `otpguard console`: the operator's web console on
// 127.0.0.1, against the server at -server with the token in
// OTPGUARD_TOKEN (ADMIN_TOKEN's value to change things, VIEWER_TOKEN's
// to look).
func runConsole(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:8080", "the otpguard server (make run)")
	listen := fs.String("listen", "127.0.0.1:8090", "where the console listens (keep it on loopback: it holds the token)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	token := getenv("OTPGUARD_TOKEN")
	if token == "" {
		return errors.New("set OTPGUARD_TOKEN to the server's ADMIN_TOKEN (read and write) or VIEWER_TOKEN (read only)")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	ui := &console.UI{Server: *server, Token: token}
	srv := &http.Server{Handler: ui.Handler(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "otpguard console on http://%s (server %s)\n", ln.Addr(), *server)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// statsObserver counts the decisions for the console's Rules page.
type statsObserver struct{ s *console.Stats }

func (o statsObserver) Observe(_ context.Context, _, _ string, d guard.Decision) {
	o.s.Record(d, emf.RuleOutcome, time.Now())
}

// watchConfig reads the GUARD_CONFIG file every second: a changed valid
// document is reloaded (Config Applied), an invalid one logged and left
// (Config Rejected); the one in force stays.
func watchConfig(ctx context.Context, file *console.ConfigFile, a *app.App, log *slog.Logger) {
	if file.Path == "" {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	rejected := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := os.ReadFile(file.Path)
		if err != nil || string(b) == rejected {
			continue
		}
		changed, err := file.Changed(string(b))
		id := console.DocID(string(b))
		switch {
		case err != nil:
			rejected = string(b)
			log.Error("config file rejected; the last good config stays", "config", id, "err", err)
			a.Server().Publish(ctx, events.Event{DetailType: events.ConfigRejected, Detail: map[string]any{"config": id, "reason": err.Error()}}, id, 24*time.Hour)
		case changed:
			rejected = ""
		}
	}
}

// configApplied logs and publishes a document put in force.
func configApplied(a *app.App, log *slog.Logger) func(string, guard.Config) {
	return func(doc string, cfg guard.Config) {
		id := console.DocID(doc)
		log.Info("config reloaded", "config", id)
		a.Server().Publish(context.Background(), events.Event{DetailType: events.ConfigApplied, Detail: map[string]any{"config": id, "rules": len(cfg.Rules)}}, id, 24*time.Hour)
	}
}
