package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Backend is where the console reads and changes things: the local
// server (Local), or a deployed stack (AWS).
type Backend interface {
	// Access is what the operator may do; an error says why not even read.
	Access(ctx context.Context) (Access, error)
	Stats(ctx context.Context) ([]RuleStats, error)
	Config(ctx context.Context) (ConfigData, error)
	Version(ctx context.Context, n int) (string, error)
	// Apply puts a validated document in force: its id, or the errors the
	// other side found in it, or a failure to reach it.
	Apply(ctx context.Context, doc string) (id string, errs []string, err error)
	// Status, Unblock and Revoke are the internal routes' answers (status
	// code, JSON body into out).
	Status(ctx context.Context, dim, value string, out any) (int, error)
	Unblock(ctx context.Context, dim, value string, out any) (int, error)
	Revoke(ctx context.Context, account string, out any) (int, error)
}

// Local is the local server (make run) at Server, with its ADMIN_TOKEN or
// VIEWER_TOKEN.
type Local struct {
	Server string
	Token  string
	HTTP   *http.Client
}

// call is a request to the server; out receives its JSON answer.
func (l *Local) call(ctx context.Context, method, path string, body io.Reader, out any) (int, error) {
	if l.HTTP == nil {
		l.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	return doJSON(ctx, l.HTTP, method, strings.TrimSuffix(l.Server, "/")+path, body, out, func(r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+l.Token)
		return nil
	})
}

// doJSON sends a request (authorized by auth) and decodes its JSON answer.
func doJSON(ctx context.Context, c *http.Client, method, u string, body io.Reader, out any, auth func(*http.Request) error) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := auth(req); err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if out != nil && len(b) > 0 {
		_ = json.Unmarshal(b, out)
	}
	return resp.StatusCode, nil
}

func (l *Local) Access(ctx context.Context) (Access, error) {
	var a Access
	if _, err := l.call(ctx, "GET", "/v1/console/whoami", nil, &a); err != nil {
		return a, fmt.Errorf("the server does not answer: %w", err)
	}
	if !a.Read {
		return a, errors.New("the server refuses this console's token (set OTPGUARD_TOKEN to its ADMIN_TOKEN or VIEWER_TOKEN)")
	}
	return a, nil
}

func (l *Local) Stats(ctx context.Context) ([]RuleStats, error) {
	var s []RuleStats
	code, err := l.call(ctx, "GET", "/v1/console/stats", nil, &s)
	if err == nil && code != 200 {
		err = fmt.Errorf("the server answered %d", code)
	}
	return s, err
}

func (l *Local) Config(ctx context.Context) (ConfigData, error) {
	var d ConfigData
	code, err := l.call(ctx, "GET", "/v1/console/config", nil, &d)
	if err == nil && code != 200 {
		err = fmt.Errorf("the server answered %d", code)
	}
	d.Where = "the server's GUARD_CONFIG file"
	return d, err
}

func (l *Local) Version(ctx context.Context, n int) (string, error) {
	var v struct{ Document string }
	code, err := l.call(ctx, "GET", fmt.Sprintf("/v1/console/config/versions/%d", n), nil, &v)
	if err == nil && code != 200 {
		err = fmt.Errorf("no version %d", n)
	}
	return v.Document, err
}

func (l *Local) Apply(ctx context.Context, doc string) (string, []string, error) {
	var out struct {
		ID       string
		Problems []string
		Detail   string
	}
	body, err := json.Marshal(map[string]string{"document": doc})
	if err != nil {
		return "", nil, err
	}
	code, err := l.call(ctx, "PUT", "/v1/console/config", bytes.NewReader(body), &out)
	switch {
	case err != nil:
		return "", nil, err
	case code != 200 && len(out.Problems) > 0:
		return "", out.Problems, nil
	case code != 200:
		return "", []string{fmt.Sprintf("%d %s", code, out.Detail)}, nil
	}
	return out.ID, nil, nil
}

func (l *Local) Status(ctx context.Context, dim, value string, out any) (int, error) {
	return l.call(ctx, "GET", "/v1/blocks/"+url.PathEscape(dim)+"/"+url.PathEscape(value), nil, out)
}

func (l *Local) Unblock(ctx context.Context, dim, value string, out any) (int, error) {
	return l.call(ctx, "DELETE", "/v1/blocks/"+url.PathEscape(dim)+"/"+url.PathEscape(value), nil, out)
}

func (l *Local) Revoke(ctx context.Context, account string, out any) (int, error) {
	return l.call(ctx, "DELETE", "/v1/devices/"+url.PathEscape(account), nil, out)
}
