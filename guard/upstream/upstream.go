// Package upstream is the authenticator that forwards to the app's own
// login and signup endpoints (AUTH=http): POST <AUTH_UPSTREAM_URL>/login
// and POST <AUTH_UPSTREAM_URL>/signup, the request body as received,
// Content-Type: application/json, X-Forwarded-For the client's address,
// each call bounded by a timeout.
//
// Login: a 2xx answer is relayed as it is (status, body, content type and
// Set-Cookie); 401 and 403 are wrong credentials; anything else, or no
// answer in time, is an upstream failure (503, not counted as the user's
// failure). Signup: 2xx and 409 (already registered) both answer 202;
// 400 and 422 are a rejection (400); anything else an upstream failure.
package upstream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard/authn"
)

// MaxAnswer bounds an upstream answer relayed to the caller.
const MaxAnswer = 64 << 10

// Authenticator forwards to one app.
type Authenticator struct {
	login, signup string
	client        *http.Client
}

// New returns the authenticator for the app at base (http or https),
// each call bounded by timeout. client may be nil.
func New(base string, timeout time.Duration, client *http.Client) (*Authenticator, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("AUTH_UPSTREAM_URL %q: want http(s)://host[/path]", base)
	}
	if client == nil {
		client = &http.Client{}
	}
	c := *client
	c.Timeout = timeout
	// The upstream's redirects are its answer, not something to follow.
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	b := strings.TrimSuffix(u.String(), "/")
	return &Authenticator{login: b + "/login", signup: b + "/signup", client: &c}, nil
}

func (a *Authenticator) post(ctx context.Context, to string, body []byte, ip, userAgent string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, to, bytes.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", authn.ErrUnavailable, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", ip)
	if userAgent != "" {
		req.Header.Set("User-Agent", userAgent)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", authn.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	if err != nil || len(b) > MaxAnswer {
		return nil, nil, fmt.Errorf("%w: the answer could not be read whole (at most %d bytes)", authn.ErrUnavailable, MaxAnswer)
	}
	return resp, b, nil
}

// The headers of the app's login answer that name the account's verified
// addresses, where a step-up code goes (docs/contract.md §6); they are not
// relayed to the client.
const (
	VerifiedEmailHeader = "X-Otpguard-Verified-Email"
	VerifiedPhoneHeader = "X-Otpguard-Verified-Phone"
)

// Login implements api.Authenticator.
func (a *Authenticator) Login(ctx context.Context, l authn.Login) (authn.LoginResult, error) {
	resp, body, err := a.post(ctx, a.login, l.Body, l.ClientIP.String(), l.UserAgent)
	if err != nil {
		return authn.LoginResult{}, err
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return authn.LoginResult{Passthrough: &authn.Passthrough{
			Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: body, Cookies: resp.Header.Values("Set-Cookie"),
		}, VerifiedEmail: resp.Header.Get(VerifiedEmailHeader), VerifiedPhone: resp.Header.Get(VerifiedPhoneHeader)}, nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return authn.LoginResult{}, authn.ErrInvalidCredentials
	}
	return authn.LoginResult{}, fmt.Errorf("%w: the app's login answered %d", authn.ErrUnavailable, resp.StatusCode)
}

// SignUp implements api.Authenticator.
func (a *Authenticator) SignUp(ctx context.Context, s authn.SignUp) error {
	resp, _, err := a.post(ctx, a.signup, s.Body, s.ClientIP.String(), s.UserAgent)
	if err != nil {
		return err
	}
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300, c == http.StatusConflict:
		return nil
	case c == http.StatusBadRequest || c == http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: the app refuses the signup", authn.ErrRejected)
	}
	return fmt.Errorf("%w: the app's signup answered %d", authn.ErrUnavailable, resp.StatusCode)
}
