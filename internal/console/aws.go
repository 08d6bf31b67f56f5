package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/emf"
	"github.com/otpguard/otpguard/internal/awsjson"
)

// AWS is a deployed stack, reached with the operator's own credentials
// (no new endpoint): the config is the SSM parameter (its version history,
// with who changed it, is the audit log; a rollback puts an old version
// again), the rules' decisions are the EMF metrics in CloudWatch
// (GetMetricData), a subject's state, unblock and device revocation are
// the API's internal routes, signed with SigV4 (execute-api). IAM decides
// what the operator may do: ssm:GetParameter*, cloudwatch:GetMetricData
// and execute-api:Invoke on the GET routes to look; ssm:PutParameter and
// the DELETE routes to change. Every call goes through internal/awsjson,
// the product's one home for AWS calls.
type AWS struct {
	AWSConfig aws.Config
	Stack     string // the metrics' Stack dimension
	Parameter string // the config parameter's name
	API       string // the stack's ApiUrl
	// ReadOnly greys out every change (an operator who knows their role
	// may only read: IAM offers no dry run of ssm:PutParameter).
	ReadOnly bool
	Now      func() time.Time
	// Getenv reads AWS_ENDPOINT_URL_SSM and AWS_ENDPOINT_URL_CLOUDWATCH;
	// default os.Getenv.
	Getenv func(string) string

	once    sync.Once // the clients, built on the first call (the pages are served concurrently)
	ssm, cw *awsjson.Client
	api     *awsjson.Signed
}

func (a *AWS) clients() {
	a.once.Do(func() {
		getenv := a.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		a.ssm = awsjson.New(awsjson.ForService(a.AWSConfig, getenv, "SSM"), "ssm", "AmazonSSM")
		a.cw = awsjson.New10(awsjson.ForService(a.AWSConfig, getenv, "CLOUDWATCH"), "monitoring", "GraniteServiceVersion20100801")
		a.api = awsjson.NewSigned(a.AWSConfig, "execute-api", 10*time.Second)
		if a.Now == nil {
			a.Now = time.Now
		}
	})
}

func (a *AWS) Access(ctx context.Context) (Access, error) {
	a.clients()
	if _, err := a.parameter(ctx, a.Parameter); err != nil && !awsjson.Is(err, "ParameterNotFound") {
		return Access{}, fmt.Errorf("your credentials cannot read the config parameter %s: %w", a.Parameter, err)
	}
	return Access{Read: true, Write: !a.ReadOnly}, nil
}

// outcomes are the Decisions outcomes the Rules page counts, by column.
var outcomes = map[string]string{"allowed": "allowed", "leased": "allowed", "denied": "denied", "denied_cached": "denied",
	"challenged": "challenged", "shadow_denied": "shadow_denied"}

func (a *AWS) Stats(ctx context.Context) ([]RuleStats, error) {
	a.clients()
	cfg, err := a.running(ctx)
	if err != nil {
		return nil, err
	}
	now := a.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	var queries []metricQuery
	keys := map[string]statKey{}
	for i, r := range cfg.Rules {
		for o := range outcomes {
			for _, day := range []bool{false, true} {
				id := fmt.Sprintf("r%d_%s_%t", i, o, day)
				period := 60
				if day {
					period = 3600
				}
				keys[id] = statKey{i, o, day}
				q := metricQuery{ID: id}
				q.MetricStat.Metric = metric{Namespace: emf.Namespace, MetricName: "Decisions", Dimensions: []dimension{
					{"Stack", a.Stack}, {"Action", r.Action}, {"Rule", r.Name}, {"Outcome", o}}}
				q.MetricStat.Period, q.MetricStat.Stat = period, "Sum"
				queries = append(queries, q)
			}
		}
	}
	out := make([]RuleStats, len(cfg.Rules))
	for i, r := range cfg.Rules {
		out[i] = RuleStats{Rule: r.Name, Action: r.Action, Mode: string(r.Mode), Limit: int(r.Limit), Window: r.Window.String(), Minutes: make([]Counts, 60)}
	}
	if err := a.fetchStats(ctx, now, queries, keys, out); err != nil {
		return nil, err
	}
	return out, nil
}

// metricQuery is a GetMetricData query of one metric's sums (the JSON
// protocol's MetricDataQuery).
type metricQuery struct {
	ID         string `json:"Id"`
	MetricStat struct {
		Metric metric
		Period int
		Stat   string
	}
}

type metric struct {
	Namespace, MetricName string
	Dimensions            []dimension
}

type dimension struct{ Name, Value string }

// metricResult is a query's answer: its periods' starts (epoch seconds)
// and values.
type metricResult struct {
	ID         string `json:"Id"`
	Timestamps []float64
	Values     []float64
}

// epoch is a JSON protocol's timestamp (epoch seconds, a fraction of them
// to the millisecond), as the SDK reads it.
func epoch(seconds float64) time.Time {
	return time.UnixMilli(int64(math.Round(seconds * 1000)))
}

// statKey is what a metric query of Stats counts: a rule's decisions of
// one outcome, by minute over the last hour or by hour over the day.
type statKey struct {
	rule    int
	outcome string
	day     bool
}

// fetchStats runs the queries, at most 500 a call and the hour's apart
// from the day's, and adds their values to out.
func (a *AWS) fetchStats(ctx context.Context, now time.Time, queries []metricQuery, keys map[string]statKey, out []RuleStats) error {
	for len(queries) > 0 {
		batch := queries[:min(len(queries), 500)]
		queries = queries[len(batch):]
		for _, day := range []bool{false, true} {
			var qs []metricQuery
			for _, q := range batch {
				if keys[q.ID].day == day {
					qs = append(qs, q)
				}
			}
			start := now.Add(-time.Hour)
			if day {
				start = now.Add(-24 * time.Hour)
			}
			if err := a.metricData(ctx, qs, start, now, func(res metricResult) { addResult(out, keys[res.ID], now, res) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// metricData runs GetMetricData for qs from start to end, page by page,
// and hands each result to add.
func (a *AWS) metricData(ctx context.Context, qs []metricQuery, start, end time.Time, add func(metricResult)) error {
	in := struct {
		MetricDataQueries  []metricQuery
		StartTime, EndTime int64
		NextToken          string `json:",omitempty"`
	}{MetricDataQueries: qs, StartTime: start.Unix(), EndTime: end.Unix()}
	for range 100 { // a bound on the pages, whatever the service answers
		var page struct {
			MetricDataResults []metricResult
			NextToken         string
		}
		if err := a.cw.Call(ctx, "GetMetricData", in, &page); err != nil {
			return fmt.Errorf("cloudwatch:GetMetricData: %w", err)
		}
		for _, res := range page.MetricDataResults {
			add(res)
		}
		if page.NextToken == "" {
			return nil
		}
		in.NextToken = page.NextToken
	}
	return errors.New("cloudwatch:GetMetricData: more than 100 pages")
}

// addResult adds one query's values to out: to the day's counts, or to
// the minute's and the hour's.
func addResult(out []RuleStats, k statKey, now time.Time, res metricResult) {
	for j, ts := range res.Timestamps {
		if j >= len(res.Values) {
			break
		}
		t, v := epoch(ts), int(res.Values[j])
		if k.day {
			count(&out[k.rule].Day, k.outcome, v)
			continue
		}
		if m := 59 - int(now.Sub(t)/time.Minute) + 1; m >= 0 && m < 60 {
			count(&out[k.rule].Minutes[m], k.outcome, v)
			count(&out[k.rule].Hour, k.outcome, v)
		}
	}
}

func count(c *Counts, outcome string, v int) {
	switch outcomes[outcome] {
	case "allowed":
		c.Allowed += v
	case "denied":
		c.Denied += v
	case "challenged":
		c.Challenged += v
	case "shadow_denied":
		c.ShadowDenied += v
	}
}

// running is the parsed document in force (the parameter; the defaults
// when it does not exist, as the functions do).
func (a *AWS) running(ctx context.Context) (config.Config, error) {
	a.clients()
	doc, err := a.parameter(ctx, a.Parameter)
	switch {
	case awsjson.Is(err, "ParameterNotFound"):
		return config.Default(), nil // what the functions run: the default rules on asn apply only with a database
	case err != nil:
		return config.Config{}, fmt.Errorf("ssm:GetParameter %s: %w", a.Parameter, err)
	}
	return config.Parse([]byte(doc))
}

func (a *AWS) Config(ctx context.Context) (ConfigData, error) {
	a.clients()
	d := ConfigData{File: true, Where: "the SSM parameter " + a.Parameter}
	value, err := a.parameter(ctx, a.Parameter)
	switch {
	case awsjson.Is(err, "ParameterNotFound"):
		d.Document = string(config.DefaultYAML())
		d.ID = DocID(d.Document)
		return d, nil
	case err != nil:
		return d, fmt.Errorf("ssm:GetParameter %s: %w", a.Parameter, err)
	}
	d.Document = value
	d.ID = DocID(d.Document)
	history, err := a.history(ctx)
	d.History = history
	return d, err
}

// parameter is the value of the SSM parameter name (a version: name:N).
func (a *AWS) parameter(ctx context.Context, name string) (string, error) {
	var out struct{ Parameter struct{ Value string } }
	err := a.ssm.Call(ctx, "GetParameter", map[string]string{"Name": name}, &out)
	return out.Parameter.Value, err
}

// history is the config parameter's versions, page by page.
func (a *AWS) history(ctx context.Context) ([]Version, error) {
	in := struct {
		Name      string
		NextToken string `json:",omitempty"`
	}{Name: a.Parameter}
	var history []Version
	for range 100 { // SSM keeps 100 versions; 50 a page at most
		var page struct {
			Parameters []struct {
				Version                 int
				LastModifiedDate        float64
				Value, LastModifiedUser string
			}
			NextToken string
		}
		if err := a.ssm.Call(ctx, "GetParameterHistory", in, &page); err != nil {
			return history, fmt.Errorf("ssm:GetParameterHistory %s: %w", a.Parameter, err)
		}
		for _, h := range page.Parameters {
			history = append(history, Version{N: h.Version, At: epoch(h.LastModifiedDate).UTC(), ID: DocID(h.Value), Who: h.LastModifiedUser})
		}
		if page.NextToken == "" {
			break
		}
		in.NextToken = page.NextToken
	}
	return history, nil
}

func (a *AWS) Version(ctx context.Context, n int) (string, error) {
	a.clients()
	return a.parameter(ctx, fmt.Sprintf("%s:%d", a.Parameter, n))
}

func (a *AWS) Apply(ctx context.Context, doc string) (string, []string, error) {
	a.clients()
	in := struct {
		Name, Value, Type string
		Overwrite         bool
	}{a.Parameter, doc, "String", true}
	if err := a.ssm.Call(ctx, "PutParameter", in, nil); err != nil {
		return "", nil, fmt.Errorf("ssm:PutParameter %s: %w", a.Parameter, err)
	}
	return DocID(doc), nil, nil
}

// signed calls one of the API's internal routes, signed with the
// operator's credentials.
func (a *AWS) signed(ctx context.Context, method, path string, out any) (int, error) {
	a.clients()
	if a.API == "" {
		return 0, errors.New("the console needs the stack's ApiUrl (-api) for the internal routes")
	}
	status, _, body, err := a.api.Do(ctx, method, strings.TrimSuffix(a.API, "/")+path, "", nil, nil)
	if err != nil {
		return 0, err
	}
	if out != nil && len(body) > 0 {
		_ = json.Unmarshal(body, out)
	}
	return status, nil
}

func (a *AWS) Status(ctx context.Context, dim, value string, out any) (int, error) {
	return a.signed(ctx, "GET", "/v1/blocks/"+url.PathEscape(dim)+"/"+url.PathEscape(value), out)
}

func (a *AWS) Unblock(ctx context.Context, dim, value string, out any) (int, error) {
	return a.signed(ctx, "DELETE", "/v1/blocks/"+url.PathEscape(dim)+"/"+url.PathEscape(value), out)
}

func (a *AWS) Revoke(ctx context.Context, account string, out any) (int, error) {
	return a.signed(ctx, "DELETE", "/v1/devices/"+url.PathEscape(account), out)
}
