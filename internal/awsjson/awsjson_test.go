package awsjson_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/otpguard/otpguard/internal/awsjson"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
)

func TestSecretsAndParameters(t *testing.T) {
	fake := awsfake.New()
	defer fake.Close()
	fake.SetSecret("s", "current")
	fake.SetSecretStage("s", "AWSPREVIOUS", "previous")
	fake.SetParameter("/p", "doc")
	sm := awsjson.New(awsfake.Config(fake.URL), "secretsmanager", "secretsmanager")
	ctx := context.Background()
	for stage, want := range map[string]string{"": "current", "AWSPREVIOUS": "previous"} {
		in := map[string]string{"SecretId": "s"}
		if stage != "" {
			in["VersionStage"] = stage
		}
		var out struct{ SecretString string }
		if err := sm.Call(ctx, "GetSecretValue", in, &out); err != nil || out.SecretString != want {
			t.Errorf("stage %q: %q, %v; want %q", stage, out.SecretString, err, want)
		}
	}
	err := sm.Call(ctx, "GetSecretValue", map[string]string{"SecretId": "s", "VersionStage": "AWSPENDING"}, nil)
	if !awsjson.Is(err, "ResourceNotFoundException") {
		t.Errorf("a missing stage: %v", err)
	}
	ssm := awsjson.New(awsfake.Config(fake.URL), "ssm", "AmazonSSM")
	var p struct{ Parameter struct{ Value string } }
	if err := ssm.Call(ctx, "GetParameter", map[string]any{"Name": "/p"}, &p); err != nil || p.Parameter.Value != "doc" {
		t.Errorf("GetParameter: %+v %v", p, err)
	}
	if err := ssm.Call(ctx, "GetParameter", map[string]any{"Name": "/missing"}, &p); !awsjson.Is(err, "ParameterNotFound") {
		t.Errorf("a missing parameter: %v", err)
	}
	// The fake refuses unsigned calls: every call above was signed.
	for _, c := range fake.Calls() {
		if c == "" {
			t.Error("an unrecognised call")
		}
	}
}

// TestTheWireFormat: what each kind of call puts on the wire, as AWS's
// SDKs put it (botocore's JSON serializer was the reference): a JSON 1.0
// query-compatible call (CloudWatch) says so and is signed for its
// service; its error's query code wins over __type; a client of
// anonymous credentials (Cognito's public operations) signs nothing; a
// signed GET without a body (the console's execute-api calls) is signed
// with the empty body's hash.
func TestTheWireFormat(t *testing.T) {
	type seen struct{ method, target, contentType, queryMode, auth, date, body string }
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Header.Get("X-Amz-Target"), r.Header.Get("Content-Type"), r.Header.Get("X-Amzn-Query-Mode"),
			r.Header.Get("Authorization"), r.Header.Get("X-Amz-Date"), string(b)}
		if r.Header.Get("X-Amz-Target") == "GraniteServiceVersion20100801.PutMetricAlarm" {
			w.Header().Set("X-Amzn-Query-Error", "LimitExceeded;Sender")
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.cloudwatch#LimitExceededFault","message":"too many"}`)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	ctx := context.Background()

	cw := awsjson.New10(awsfake.Config(srv.URL), "monitoring", "GraniteServiceVersion20100801")
	if err := cw.Call(ctx, "GetMetricData", map[string]int{"StartTime": 1}, nil); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.target != "GraniteServiceVersion20100801.GetMetricData" || s.contentType != "application/x-amz-json-1.0" || s.queryMode != "true" ||
		!strings.Contains(s.auth, "/us-east-1/monitoring/aws4_request") || s.body != `{"StartTime":1}` {
		t.Errorf("a CloudWatch call: %+v", s)
	}
	err := cw.Call(ctx, "PutMetricAlarm", map[string]string{}, nil)
	<-got
	if !awsjson.Is(err, "LimitExceeded") {
		t.Errorf("a query-compatible error: %v, want the code LimitExceeded", err)
	}

	anon := awsfake.Config(srv.URL)
	anon.Credentials = aws.AnonymousCredentials{}
	if err := awsjson.New(anon, "cognito-idp", "AWSCognitoIdentityProviderService").Call(ctx, "InitiateAuth", map[string]string{}, nil); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s.auth != "" || s.contentType != "application/x-amz-json-1.1" || s.queryMode != "" {
		t.Errorf("an anonymous call: %+v", s)
	}

	status, _, _, err := awsjson.NewSigned(awsfake.Config(srv.URL), "execute-api", time.Second).Do(ctx, "GET", srv.URL+"/v1/blocks/ip/x", "", nil, nil)
	s = <-got
	if err != nil || status != 200 || s.method != "GET" {
		t.Fatalf("a signed GET: %d %v %+v", status, err, s)
	}
	// the same request signed by hand with the empty body's hash
	at, _ := time.Parse("20060102T150405Z", s.date)
	want, _ := http.NewRequest("GET", srv.URL+"/v1/blocks/ip/x", nil)
	const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	creds, _ := awsfake.Config(srv.URL).Credentials.Retrieve(ctx)
	if err := v4.NewSigner().SignHTTP(ctx, creds, want, emptyHash, "execute-api", "us-east-1", at); err != nil {
		t.Fatal(err)
	}
	if s.auth != want.Header.Get("Authorization") {
		t.Errorf("a signed GET's signature:\n%s\nwant\n%s", s.auth, want.Header.Get("Authorization"))
	}
}

// TestErrorCodesAndRetries: a failed answer's code is read as AWS's SDKs
// read it (the header first, then the body's code, then __type, without
// a namespace or a URI); a throttled or 5xx answer is tried once more; a
// call without an answer (a connection closed, a timeout) never is: it
// may have run.
func TestErrorCodesAndRetries(t *testing.T) {
	var calls atomic.Int32
	answers := map[string]func(w http.ResponseWriter){
		"Plain": func(w http.ResponseWriter) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"__type":"NotAuthorizedException","message":"no"}`)
		},
		"Namespaced": func(w http.ResponseWriter) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"__type":"com.amazon.coral#NotAuthorizedException:http://internal.amazon.com/coral/com.amazon.coral/"}`)
		},
		"Header": func(w http.ResponseWriter) {
			w.Header().Set("X-Amzn-ErrorType", "NotAuthorizedException:http://internal.amazon.com/coral/")
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"__type":"SomethingElse"}`)
		},
		"Code": func(w http.ResponseWriter) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"code":"NotAuthorizedException"}`)
		},
		"Throttled": func(w http.ResponseWriter) {
			if calls.Load() == 1 {
				w.WriteHeader(400)
				_, _ = io.WriteString(w, `{"__type":"ThrottlingException"}`)
				return
			}
			_, _ = io.WriteString(w, `{}`)
		},
		"HangUp": func(w http.ResponseWriter) { // the request read, the connection closed without an answer
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close()
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		answers[strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "Svc.")](w)
	}))
	defer srv.Close()
	c := awsjson.New(awsfake.Config(srv.URL), "svc", "Svc")
	ctx := context.Background()
	for _, op := range []string{"Plain", "Namespaced", "Header", "Code"} {
		calls.Store(0)
		if err := c.Call(ctx, op, struct{}{}, nil); !awsjson.Is(err, "NotAuthorizedException") || calls.Load() != 1 {
			t.Errorf("%s: %v after %d calls, want the code NotAuthorizedException after 1", op, err, calls.Load())
		}
	}
	calls.Store(0)
	if err := c.Call(ctx, "Throttled", struct{}{}, nil); err != nil || calls.Load() != 2 {
		t.Errorf("throttled once: %v after %d calls, want success after 2", err, calls.Load())
	}
	calls.Store(0)
	if err := c.Call(ctx, "HangUp", struct{}{}, nil); err == nil || calls.Load() != 1 {
		t.Errorf("a call without an answer: %v after %d calls, want an error after 1", err, calls.Load())
	}
}

// TestNoCredentialsIsAnError: a configuration without credentials signs
// nothing and sends nothing; anonymous credentials send unsigned.
func TestNoCredentialsIsAnError(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	cfg := awsfake.Config(srv.URL)
	cfg.Credentials = nil
	if _, _, _, err := awsjson.NewSigned(cfg, "ssm", time.Second).Do(context.Background(), "GET", srv.URL, "", nil, nil); err == nil || calls.Load() != 0 {
		t.Errorf("no credentials: %v, %d calls", err, calls.Load())
	}
}
