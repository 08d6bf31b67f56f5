package lambdaapp

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/emf"
)

// notReady serves a function whose init failed: 503 not_ready with the
// dependency that failed (never its address or the error, which the log
// has), while it tries init again on invocations, one at a time, after a
// pause that doubles from 1s to 1m. The first try that succeeds serves
// its invocation and every one after.
type notReady struct {
	init    func(context.Context) (http.Handler, error)
	log     *slog.Logger
	metrics *emf.Observer
	h       atomic.Pointer[http.Handler]
	reason  atomic.Value // string
	mu      sync.Mutex   // one init at a time
	next    time.Time
	pause   time.Duration
}

func newNotReady(err error, log *slog.Logger, metrics *emf.Observer, init func(context.Context) (http.Handler, error)) *notReady {
	n := &notReady{init: init, log: log, metrics: metrics, pause: time.Second}
	n.failed(err)
	return n
}

// failed records an init failure; the caller holds mu (or is the
// constructor).
func (n *notReady) failed(err error) {
	what := "a dependency"
	var ie *initError
	if errors.As(err, &ie) {
		what = ie.what
	}
	n.reason.Store("otpguard is not ready: " + what + " could not be read or is invalid; the function's log says why")
	n.log.Error("init failed; answering 503 not_ready and trying again on later invocations", "err", err, "retryIn", n.pause.String())
	n.next = time.Now().Add(n.pause)
	n.pause = min(2*n.pause, time.Minute)
}

func (n *notReady) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := n.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	if n.mu.TryLock() {
		if h := n.h.Load(); h == nil && !time.Now().Before(n.next) {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 8*time.Second)
			h, err := n.init(ctx)
			cancel()
			if err == nil {
				n.h.Store(&h)
				n.mu.Unlock()
				n.log.Info("init succeeded")
				h.ServeHTTP(w, r)
				return
			}
			n.failed(err)
		}
		n.mu.Unlock()
	}
	n.metrics.Count(r.Context(), "NotReady")
	api.WriteProblem(w, "not_ready", n.reason.Load().(string))
}
