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
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/otpguard/otpguard/config"
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
	server := fs.String("server", "http://127.0.0.1:8080", "the local otpguard server (make run)")
	listen := fs.String("listen", "127.0.0.1:8090", "where the console listens (keep it on loopback: it holds the token or your credentials)")
	stack := fs.String("stack", "", "a deployed stack's name: the console then reads SSM and CloudWatch and calls the API with your AWS credentials")
	region := fs.String("region", getenv("AWS_REGION"), "the stack's region")
	param := fs.String("parameter", "", "the stack's config parameter (default /<stack>/otpguard/config)")
	apiURL := fs.String("api", "", "the stack's ApiUrl output, for the internal routes (subject lookup, unblock)")
	readOnly := fs.Bool("readonly", false, "grey out every change (your role may only read)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var backend console.Backend
	if *stack != "" {
		cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(*region))
		if err != nil {
			return fmt.Errorf("AWS credentials: %w", err)
		}
		if *param == "" {
			*param = "/" + *stack + "/otpguard/config"
		}
		backend = &console.AWS{AWSConfig: cfg, Stack: *stack, Parameter: *param, API: *apiURL, ReadOnly: *readOnly}
	} else {
		token := getenv("OTPGUARD_TOKEN")
		if token == "" {
			return errors.New("set OTPGUARD_TOKEN to the server's ADMIN_TOKEN (read and write) or VIEWER_TOKEN (read only), or give -stack")
		}
		backend = &console.Local{Server: *server, Token: token}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	// The secret of this start, printed once in the URL to open (as
	// Jupyter does): the browser that opens it keeps it in a cookie.
	ui := &console.UI{Backend: backend, Secret: console.NewSecret()}
	srv := &http.Server{Handler: ui.Handler(), ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 16 << 10}
	fmt.Fprintf(stdout, "otpguard console on http://%s/?token=%s\n", ln.Addr(), ui.Secret)
	fmt.Fprintln(stdout, "open that URL in your browser: the token is this start's, and only the browser that opens it may use the console")
	return serve(ctx, srv, problemListener{ln})
}

// statsObserver counts the decisions for the console's Rules page.
type statsObserver struct{ s *console.Stats }

func (o statsObserver) Observe(_ context.Context, _, _ string, d guard.Decision) {
	o.s.Record(d, emf.RuleOutcome, time.Now())
}

func (o statsObserver) ObserveSubject(_ context.Context, _, subject string, d guard.Decision) {
	o.s.Subject(subject, d, time.Now())
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
		b, err := readConfig(file.Path)
		var tooLong *config.LimitError
		if (err != nil && !errors.As(err, &tooLong)) || string(b) == rejected {
			continue // unreadable (being replaced?): read again in a second
		}
		changed := false
		if tooLong == nil {
			changed, err = file.Changed(string(b))
		}
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
func configApplied(a *app.App, log *slog.Logger) func(string, config.Config) {
	return func(doc string, cfg config.Config) {
		id := console.DocID(doc)
		log.Info("config reloaded", "config", id)
		a.Server().Publish(context.Background(), events.Event{DetailType: events.ConfigApplied, Detail: map[string]any{"config": id, "rules": len(cfg.Rules)}}, id, 24*time.Hour)
	}
}
