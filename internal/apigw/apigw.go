// Package apigw runs an http.Handler behind an API Gateway HTTP API
// (payload format 2.0) in Lambda: the event becomes an *http.Request, the
// handler's answer the response event. The client address is the
// gateway's requestContext.http.sourceIp, set as the request's RemoteAddr;
// the Lambda request id goes into the context for the logs, and so does
// the IAM caller when the route has the IAM authorizer (see IAMCaller).
package apigw

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/otpguard/otpguard/guard/api"
)

// Handler returns the Lambda handler that serves h.
func Handler(h http.Handler) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, e events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		if lc, ok := lambdacontext.FromContext(ctx); ok {
			ctx = api.WithRequestID(ctx, lc.AwsRequestID)
		}
		r, err := Request(ctx, e)
		if err != nil {
			// A request the gateway should never pass: a problem, not an
			// invocation error (which the gateway would turn into a 500).
			w := NewResponseWriter()
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"type":"urn:otpguard:problem:invalid_request","title":"Invalid request","status":400,"detail":%q,"code":"invalid_request"}`, err.Error())
			return w.Event(), nil
		}
		w := NewResponseWriter()
		h.ServeHTTP(w, r)
		return w.Event(), nil
	}
}

type iamKey struct{}

// IAMCaller returns the ARN of the IAM principal the gateway's IAM
// authorizer let through, or "" when the route has none.
func IAMCaller(ctx context.Context) string {
	s, _ := ctx.Value(iamKey{}).(string)
	return s
}

// Request builds the http.Request an event describes.
func Request(ctx context.Context, e events.APIGatewayV2HTTPRequest) (*http.Request, error) {
	body := []byte(e.Body)
	if e.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(e.Body); err != nil {
			return nil, fmt.Errorf("apigw: body is not base64: %w", err)
		}
	}
	if a := e.RequestContext.Authorizer; a != nil && a.IAM != nil && a.IAM.UserARN != "" {
		ctx = context.WithValue(ctx, iamKey{}, a.IAM.UserARN)
	}
	method := e.RequestContext.HTTP.Method
	path := e.RawPath
	if path == "" {
		path = e.RequestContext.HTTP.Path
	}
	u := &url.URL{Path: path, RawQuery: e.RawQueryString}
	if raw, err := url.PathUnescape(path); err == nil {
		u.Path, u.RawPath = raw, path
	}
	r, err := http.NewRequestWithContext(ctx, method, u.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("apigw: %w", err)
	}
	for k, v := range e.Headers {
		// Payload 2.0 joins repeated headers with commas.
		r.Header.Set(k, v)
	}
	if len(e.Cookies) > 0 {
		r.Header.Set("Cookie", strings.Join(e.Cookies, "; "))
	}
	r.Host = e.RequestContext.DomainName
	r.RemoteAddr = e.RequestContext.HTTP.SourceIP
	r.ContentLength = int64(len(body))
	r.RequestURI = u.RequestURI()
	return r, nil
}

// ResponseWriter collects a handler's answer for the response event.
type ResponseWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

// NewResponseWriter returns an empty ResponseWriter.
func NewResponseWriter() *ResponseWriter { return &ResponseWriter{header: http.Header{}} }

// Header implements http.ResponseWriter.
func (w *ResponseWriter) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter; only the first call counts.
func (w *ResponseWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

// Write implements http.ResponseWriter.
func (w *ResponseWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

// Event is the response event of what was written; a body that is not
// UTF-8 text goes base64-encoded.
func (w *ResponseWriter) Event() events.APIGatewayV2HTTPResponse {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	out := events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{}}
	for k, vs := range w.header {
		if http.CanonicalHeaderKey(k) == "Set-Cookie" {
			out.Cookies = append(out.Cookies, vs...)
			continue
		}
		out.Headers[k] = strings.Join(vs, ",")
	}
	body := w.body.Bytes()
	if utf8.Valid(body) {
		out.Body = string(body)
	} else {
		out.Body, out.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	return out
}
