package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/emf"
)

// AWS is a deployed stack, reached with the operator's own credentials
// (no new endpoint): the config is the SSM parameter (its version history,
// with who changed it, is the audit log; a rollback puts an old version
// again), the rules' decisions are the EMF metrics in CloudWatch
// (GetMetricData), a subject's state, unblock and device revocation are
// the API's internal routes, signed with SigV4 (execute-api). IAM decides
// what the operator may do: ssm:GetParameter*, cloudwatch:GetMetricData
// and execute-api:Invoke on the GET routes to look; ssm:PutParameter and
// the DELETE routes to change.
type AWS struct {
	AWSConfig aws.Config
	Stack     string // the metrics' Stack dimension
	Parameter string // the config parameter's name
	API       string // the stack's ApiUrl
	// ReadOnly greys out every change (an operator who knows their role
	// may only read: IAM offers no dry run of ssm:PutParameter).
	ReadOnly bool
	HTTP     *http.Client
	Now      func() time.Time

	ssm *ssm.Client
	cw  *cloudwatch.Client
}

func (a *AWS) clients() {
	if a.ssm == nil {
		a.ssm, a.cw = ssm.NewFromConfig(a.AWSConfig), cloudwatch.NewFromConfig(a.AWSConfig)
	}
	if a.HTTP == nil {
		a.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	if a.Now == nil {
		a.Now = time.Now
	}
}

func (a *AWS) Access(ctx context.Context) (Access, error) {
	a.clients()
	if _, err := a.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(a.Parameter)}); err != nil {
		var nf *ssmtypes.ParameterNotFound
		if !errors.As(err, &nf) {
			return Access{}, fmt.Errorf("your credentials cannot read the config parameter %s: %w", a.Parameter, err)
		}
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
	var queries []cwtypes.MetricDataQuery
	keys := map[string]statKey{}
	for i, r := range cfg.Rules {
		for o := range outcomes {
			for _, day := range []bool{false, true} {
				id := fmt.Sprintf("r%d_%s_%t", i, o, day)
				period := int32(60)
				if day {
					period = 3600
				}
				keys[id] = statKey{i, o, day}
				queries = append(queries, cwtypes.MetricDataQuery{Id: aws.String(id), MetricStat: &cwtypes.MetricStat{
					Metric: &cwtypes.Metric{Namespace: aws.String(emf.Namespace), MetricName: aws.String("Decisions"), Dimensions: []cwtypes.Dimension{
						{Name: aws.String("Stack"), Value: aws.String(a.Stack)}, {Name: aws.String("Action"), Value: aws.String(r.Action)},
						{Name: aws.String("Rule"), Value: aws.String(r.Name)}, {Name: aws.String("Outcome"), Value: aws.String(o)}}},
					Period: aws.Int32(period), Stat: aws.String("Sum")}})
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

// statKey is what a metric query of Stats counts: a rule's decisions of
// one outcome, by minute over the last hour or by hour over the day.
type statKey struct {
	rule    int
	outcome string
	day     bool
}

// fetchStats runs the queries, at most 500 a call and the hour's apart
// from the day's, and adds their values to out.
func (a *AWS) fetchStats(ctx context.Context, now time.Time, queries []cwtypes.MetricDataQuery, keys map[string]statKey, out []RuleStats) error {
	for len(queries) > 0 {
		batch := queries[:min(len(queries), 500)]
		queries = queries[len(batch):]
		for _, day := range []bool{false, true} {
			var qs []cwtypes.MetricDataQuery
			for _, q := range batch {
				if keys[*q.Id].day == day {
					qs = append(qs, q)
				}
			}
			start := now.Add(-time.Hour)
			if day {
				start = now.Add(-24 * time.Hour)
			}
			p := cloudwatch.NewGetMetricDataPaginator(a.cw, &cloudwatch.GetMetricDataInput{MetricDataQueries: qs, StartTime: aws.Time(start), EndTime: aws.Time(now)})
			for p.HasMorePages() {
				page, err := p.NextPage(ctx)
				if err != nil {
					return fmt.Errorf("cloudwatch:GetMetricData: %w", err)
				}
				for _, res := range page.MetricDataResults {
					addResult(out, keys[aws.ToString(res.Id)], now, res)
				}
			}
		}
	}
	return nil
}

// addResult adds one query's values to out: to the day's counts, or to
// the minute's and the hour's.
func addResult(out []RuleStats, k statKey, now time.Time, res cwtypes.MetricDataResult) {
	for j, t := range res.Timestamps {
		v := int(res.Values[j])
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
	d, err := a.Config(ctx)
	if err != nil {
		return config.Config{}, err
	}
	return config.Parse([]byte(d.Document))
}

func (a *AWS) Config(ctx context.Context) (ConfigData, error) {
	a.clients()
	d := ConfigData{File: true, Where: "the SSM parameter " + a.Parameter}
	out, err := a.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(a.Parameter)})
	var nf *ssmtypes.ParameterNotFound
	switch {
	case errors.As(err, &nf):
		d.Document = string(config.DefaultYAML())
		d.ID = DocID(d.Document)
		return d, nil
	case err != nil:
		return d, fmt.Errorf("ssm:GetParameter %s: %w", a.Parameter, err)
	}
	d.Document = aws.ToString(out.Parameter.Value)
	d.ID = DocID(d.Document)
	p := ssm.NewGetParameterHistoryPaginator(a.ssm, &ssm.GetParameterHistoryInput{Name: aws.String(a.Parameter)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return d, fmt.Errorf("ssm:GetParameterHistory %s: %w", a.Parameter, err)
		}
		for _, h := range page.Parameters {
			d.History = append(d.History, Version{N: int(h.Version), At: aws.ToTime(h.LastModifiedDate).UTC(), ID: DocID(aws.ToString(h.Value)), Who: aws.ToString(h.LastModifiedUser)})
		}
	}
	return d, nil
}

func (a *AWS) Version(ctx context.Context, n int) (string, error) {
	a.clients()
	out, err := a.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(fmt.Sprintf("%s:%d", a.Parameter, n))})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.Parameter.Value), nil
}

func (a *AWS) Apply(ctx context.Context, doc string) (string, []string, error) {
	a.clients()
	if _, err := a.ssm.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(a.Parameter), Value: aws.String(doc),
		Type: ssmtypes.ParameterTypeString, Overwrite: aws.Bool(true)}); err != nil {
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
	return doJSON(ctx, a.HTTP, method, strings.TrimSuffix(a.API, "/")+path, nil, out, func(r *http.Request) error {
		creds, err := a.AWSConfig.Credentials.Retrieve(ctx)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(nil)
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			sum = sha256.Sum256(b)
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		return v4.NewSigner().SignHTTP(ctx, creds, r, hex.EncodeToString(sum[:]), "execute-api", a.AWSConfig.Region, a.Now())
	})
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
