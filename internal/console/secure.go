package console

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/otpguard/otpguard/config"
)

// The console is an admin credential on localhost (it holds the server's
// ADMIN_TOKEN or the operator's AWS credentials), and any page the
// operator visits can send requests to 127.0.0.1. So it defends itself as
// Jupyter does, and more:
//
//   - Host: every request must name the address the console listens on
//     (or localhost on that port), so a page whose name resolves to
//     127.0.0.1 (DNS rebinding) is refused, reads included.
//   - A per-start secret: the URL the console prints carries it once
//     (?token=); the browser that opens it gets it back as an HttpOnly,
//     SameSite=Strict cookie and is sent to the page without it. Every
//     page and every change needs the cookie.
//   - Changes (every POST) must come from the console's own origin (an
//     Origin equal to it, a Sec-Fetch-Site of same-origin when sent:
//     another port of 127.0.0.1 is same-site, not same-origin) and be
//     JSON (application/json, which no form and no cross-origin request
//     without a preflight can send), of a bounded size.

// NewSecret is a per-start secret: 256 random bits.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// cookieName is the session cookie's name for the console on port: cookies
// do not tell ports apart, and two consoles (an admin's and a viewer's)
// may run on one host.
func cookieName(port string) string { return "otpguard_console_" + port }

// maxChangeBody bounds a change's body: a config document (at most
// config.MaxConfigBytes) written as a JSON string, where a quote, a
// backslash or a tab takes two bytes.
const maxChangeBody = 2*config.MaxConfigBytes + 1024

// localHosts are the Host values a request on the connection of r may
// name: the address it was accepted on, and localhost on its port when
// that address is a loopback one.
func localHosts(r *http.Request) []string {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return nil
	}
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return nil
	}
	out := []string{net.JoinHostPort(host, port)}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		out = append(out, net.JoinHostPort("localhost", port))
	}
	return out
}

// defend checks every request as the package comment says before h
// sees it; the login exchange (GET /?token=) and the embedded assets
// need no session.
func (u *UI) defend(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")

		host := strings.ToLower(r.Host)
		hosts := localHosts(r)
		if !contains(hosts, host) {
			writeProblem(w, "foreign_host", fmt.Sprintf("this console answers only to the address it listens on (%s), not to the name this request was sent to", strings.Join(hosts, " or ")))
			return
		}
		_, port, _ := net.SplitHostPort(host)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if p := sameOrigin(r, "http://"+host); p != nil {
				p.write(w)
				return
			}
		}
		if strings.HasPrefix(r.URL.Path, "/assets/") {
			h.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/" && r.URL.Query().Has("token") {
			u.login(w, r, port)
			return
		}
		c, err := r.Cookie(cookieName(port))
		if err != nil || u.Secret == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(u.Secret)) != 1 {
			writeProblem(w, "unauthorized", "open the URL `otpguard console` printed when it started: it carries this start's token")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if p := jsonBody(w, r); p != nil {
				p.write(w)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// login exchanges the URL's token for the session cookie and sends the
// browser to the page without it (out of its address bar and history).
func (u *UI) login(w http.ResponseWriter, r *http.Request, port string) {
	tok := r.URL.Query().Get("token")
	if u.Secret == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(u.Secret)) != 1 {
		writeProblem(w, "unauthorized", "this token is not this start's: open the URL `otpguard console` printed when it started")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(port), Value: u.Secret, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// sameOrigin refuses a change that does not come from origin: its Origin
// must be origin, and its Sec-Fetch-Site, when sent, same-origin.
func sameOrigin(r *http.Request, origin string) *problem {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return newProblem("cross_origin", fmt.Sprintf("a change must come from the console's own pages (Sec-Fetch-Site: %s)", site))
	}
	if o := r.Header.Get("Origin"); o != origin {
		return newProblem("cross_origin", "a change must come from the console's own pages (its Origin must be "+origin+")")
	}
	return nil
}

// jsonBody refuses a change that is not JSON and bounds its body.
func jsonBody(w http.ResponseWriter, r *http.Request) *problem {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return newProblem("unsupported_media_type", "a change is a JSON body (Content-Type: application/json)")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxChangeBody)
	return nil
}

// decodeBody reads r's JSON body into v strictly (no unknown member, one
// value); a body over its bound is a 413 naming the bound.
func decodeBody(r *http.Request, v any) *problem {
	b, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return newProblem("payload_too_large", fmt.Sprintf("the body is over %d bytes: a config document is at most %d bytes (config.MaxConfigBytes)", mbe.Limit, config.MaxConfigBytes))
	case err != nil:
		return newProblem("invalid_request", "the body could not be read")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		p := newProblem("invalid_request", "the body is not the JSON this route takes")
		p.Errors = map[string]string{"body": err.Error()}
		return p
	}
	if dec.More() {
		return newProblem("invalid_request", "the body has data after its JSON value")
	}
	return nil
}

// limitError is the bound a config error is about, if it is one.
func limitError(err error) *config.LimitError {
	var le *config.LimitError
	if errors.As(err, &le) {
		return le
	}
	return nil
}
