package api_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard/authn"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// panicking is an authenticator that panics with v.
type panicking struct{ v any }

func (p panicking) Login(context.Context, authn.Login) (authn.LoginResult, error) { panic(p.v) }
func (p panicking) SignUp(context.Context, authn.SignUp) error                    { panic(p.v) }

// TestAPanicIsA500ThatTellsNothing: a handler's panic is answered with a
// 500 problem and logged by the route and the panic's type, never its
// text (which may hold the input); net/http's ErrAbortHandler, which
// means "abort the response", is panicked on for net/http to handle.
func TestAPanicIsA500ThatTellsNothing(t *testing.T) {
	logs := &testutil.Buffer{}
	h, _ := serve(t, "", func(s *app.Settings) {
		s.Auth = panicking{errors.New("ann@example.com said correct horse")}
		s.Log = slog.New(slog.NewJSONHandler(logs, nil))
	})
	w, m := call(t, h, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": "correct horse"}, false)
	problemOf(t, w, m, http.StatusInternalServerError, "internal_error")
	out := logs.String()
	if !strings.Contains(out, `"msg":"panic"`) || !strings.Contains(out, `"route":"/v1/login"`) || !strings.Contains(out, `"panic":"*errors.errorString"`) {
		t.Errorf("the panic's log line: %s", out)
	}
	if strings.Contains(out, "ann@example.com") || strings.Contains(out, "horse") {
		t.Errorf("the log holds the input: %s", out)
	}

	h, _ = serve(t, "", func(s *app.Settings) { s.Auth = panicking{http.ErrAbortHandler} })
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Errorf("ErrAbortHandler: recovered %v, want it panicked on", v)
		}
	}()
	call(t, h, "POST", "/v1/login", map[string]string{"username": "ann@example.com", "password": "correct horse"}, false)
	t.Error("ErrAbortHandler was answered, not panicked on")
}
