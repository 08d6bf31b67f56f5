package lambdaapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/otpguard/otpguard/guard/api"
)

// triggerPath is the in-process path a trigger event takes through the
// function's handler: the same refresh schedules and not-ready handling
// as the HTTP functions, without an HTTP request ever existing.
const triggerPath = "/_cognito-trigger"

// TriggerHandler is the Lambda handler of a trigger function whose
// handler (Start's) is h: the event goes through h, and its answer back
// to Cognito, as the event or as an error whose text Cognito may show.
func TriggerHandler(h http.Handler) func(ctx context.Context, event json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, event json.RawMessage) (json.RawMessage, error) {
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			ctx = api.WithRequestID(ctx, lc.AwsRequestID)
		}
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, triggerPath, bytes.NewReader(event))
		if err != nil {
			return nil, err
		}
		w := &answer{header: http.Header{}, status: http.StatusOK}
		h.ServeHTTP(w, r)
		if w.status == http.StatusOK {
			return w.body.Bytes(), nil
		}
		var p struct{ Detail string }
		_ = json.Unmarshal(w.body.Bytes(), &p)
		if p.Detail == "" {
			p.Detail = "otpguard could not answer the trigger"
		}
		return nil, errors.New(p.Detail)
	}
}

// serveTrigger answers a trigger event that TriggerHandler passed: 200
// and the event back, or a problem whose detail is the error Cognito sees
// (a denial's text is written for the user; any other failure is logged
// and answered in general words).
func (rt *runtime) serveTrigger(w http.ResponseWriter, r *http.Request) {
	event, err := io.ReadAll(r.Body)
	if err == nil {
		var out json.RawMessage
		if out, err = rt.trigger(r.Context(), event); err == nil {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(out)
			return
		}
	}
	var denied *api.Denied
	if errors.As(err, &denied) {
		api.WriteProblem(w, "rate_limited", denied.Message)
		return
	}
	rt.log.ErrorContext(r.Context(), "trigger failed", "err", err)
	api.WriteProblem(w, "internal_error", "otpguard could not answer the trigger; try again")
}

// answer is the ResponseWriter of a trigger's in-process request.
type answer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (a *answer) Header() http.Header         { return a.header }
func (a *answer) Write(b []byte) (int, error) { return a.body.Write(b) }
func (a *answer) WriteHeader(status int)      { a.status = status }
