// Package emf writes decision metrics in CloudWatch Embedded Metric Format:
// JSON lines on stdout that the Lambda log agent turns into metrics,
// without a PutMetricData call on the request path.
//
// The metrics, in namespace Namespace, each also with the dimension
// Stack (the CloudFormation stack, so two stacks in one account do not
// mix):
//
//	Requests        dimensions Action, Outcome       (sent, approved, rate_limited,
//	                                                  invalid_code, store_unavailable,
//	                                                  delivery_unavailable, invalid_request,
//	                                                  authenticated, invalid_credentials, ...)
//	Decisions       dimensions Action, Rule, Outcome (allowed, denied, denied_cached, leased,
//	                                                  shadow_denied, store_error, skipped,
//	                                                  challenged; and for the proof a
//	                                                  challenge asked for: passed, failed)
//	Sent            dimensions Channel, Country      (a message delivered: email, or
//	                                                  sms and its destination's country,
//	                                                  the SMS cost proxy)
//	Latency         dimension Action                 (milliseconds, a guarded request's
//	                                                  whole time in the function)
//	ConfigRejected  (a config or key refresh that was refused)
//	NotReady        (an invocation answered 503 not_ready)
//
// No identifier is ever a dimension or a property.
package emf

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/otpguard/otpguard/guard"
)

// Namespace is the CloudWatch namespace of the metrics.
const Namespace = "otpguard"

// Metrics lists the metric names the package writes (the stack's
// dashboard names them: tests/deploy checks both ways).
var Metrics = []string{"Requests", "Decisions", "Sent", "Latency", "ConfigRejected", "NotReady"}

// Observer writes one EMF line per request and per rule evaluated. It
// implements api.Observer.
type Observer struct {
	mu    sync.Mutex
	w     io.Writer
	now   func() time.Time
	stack string
}

// New returns an Observer writing to w (os.Stdout in Lambda). now stamps
// the metrics (time.Now when nil); stack is the Stack dimension.
func New(w io.Writer, now func() time.Time, stack string) *Observer {
	if now == nil {
		now = time.Now
	}
	return &Observer{w: w, now: now, stack: stack}
}

type metricDirective struct {
	Namespace  string     `json:"Namespace"`
	Dimensions [][]string `json:"Dimensions"`
	Metrics    []metric   `json:"Metrics"`
}

type metric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type metadata struct {
	Timestamp         int64             `json:"Timestamp"`
	CloudWatchMetrics []metricDirective `json:"CloudWatchMetrics"`
}

// Observe implements api.Observer.
func (o *Observer) Observe(_ context.Context, action, outcome string, d guard.Decision) {
	ts := o.now().UnixMilli()
	lines := []map[string]any{{
		"_aws":  metadata{ts, []metricDirective{{Namespace, [][]string{{"Stack", "Action", "Outcome"}}, []metric{{"Requests", "Count"}}}}},
		"Stack": o.stack, "Action": action, "Outcome": outcome, "Requests": 1,
	}}
	for _, r := range d.Rules {
		lines = append(lines, map[string]any{
			"_aws":  metadata{ts, []metricDirective{{Namespace, [][]string{{"Stack", "Action", "Rule", "Outcome"}}, []metric{{"Decisions", "Count"}}}}},
			"Stack": o.stack, "Action": action, "Rule": r.Rule, "Outcome": RuleOutcome(r), "Decisions": 1,
		})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range lines {
		b, err := json.Marshal(l)
		if err == nil {
			_, _ = o.w.Write(append(b, '\n'))
		}
	}
}

// Challenge implements api.ChallengeObserver: a Decisions metric with
// the outcome of the proof rule asked for (passed, failed).
func (o *Observer) Challenge(_ context.Context, action, rule, outcome string) {
	b, err := json.Marshal(map[string]any{
		"_aws":  metadata{o.now().UnixMilli(), []metricDirective{{Namespace, [][]string{{"Stack", "Action", "Rule", "Outcome"}}, []metric{{"Decisions", "Count"}}}}},
		"Stack": o.stack, "Action": action, "Rule": rule, "Outcome": outcome, "Decisions": 1,
	})
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(b, '\n'))
}

// Sent implements api.SendObserver: one message delivered on channel
// (email, sms) to a destination in country (ISO 3166 alpha-2; "-" for
// email).
func (o *Observer) Sent(_ context.Context, channel, country string) {
	if country == "" {
		country = "-"
	}
	o.write(map[string]any{
		"_aws":  metadata{o.now().UnixMilli(), []metricDirective{{Namespace, [][]string{{"Stack", "Channel", "Country"}}, []metric{{"Sent", "Count"}}}}},
		"Stack": o.stack, "Channel": channel, "Country": country, "Sent": 1,
	})
}

// Latency implements api.LatencyObserver: a guarded request's time.
func (o *Observer) Latency(_ context.Context, action string, d time.Duration) {
	o.write(map[string]any{
		"_aws":  metadata{o.now().UnixMilli(), []metricDirective{{Namespace, [][]string{{"Stack", "Action"}}, []metric{{"Latency", "Milliseconds"}}}}},
		"Stack": o.stack, "Action": action, "Latency": float64(d.Microseconds()) / 1000,
	})
}

func (o *Observer) write(line map[string]any) {
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(b, '\n'))
}

// Count writes one of a metric that has only the Stack dimension.
func (o *Observer) Count(_ context.Context, name string) {
	b, err := json.Marshal(map[string]any{
		"_aws":  metadata{o.now().UnixMilli(), []metricDirective{{Namespace, [][]string{{"Stack"}}, []metric{{name, "Count"}}}}},
		"Stack": o.stack, name: 1,
	})
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.w.Write(append(b, '\n'))
}

// RuleOutcome names what a rule did: allowed, denied, denied_cached (a
// denial answered from the deny cache), leased (an admission paid from a
// local lease), shadow_denied (a shadow rule that would have denied),
// store_error or skipped.
func RuleOutcome(r guard.Result) string {
	switch {
	case r.StoreError:
		return "store_error"
	case r.Cached:
		return "denied_cached"
	case r.Skipped:
		return "skipped"
	case r.Leased:
		return "leased"
	case r.Challenged:
		return "challenged"
	case r.Allowed:
		return "allowed"
	case r.Mode == guard.ModeShadow:
		return "shadow_denied"
	}
	return "denied"
}
