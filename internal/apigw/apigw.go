// Package apigw runs an http.Handler behind an API Gateway HTTP API
// (payload format 2.0) in Lambda: the event becomes an *http.Request, the
// handler's answer the response event. The client address is the
// gateway's requestContext.http.sourceIp, set as the request's RemoteAddr,
// and the Lambda request id goes into the context for the logs.
package apigw

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
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
			return events.APIGatewayV2HTTPResponse{}, err
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return Response(w.Result().StatusCode, w.Header(), w.Body.Bytes()), nil
	}
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

// Response is the response event of an HTTP answer; a body that is not
// UTF-8 text goes base64-encoded.
func Response(status int, h http.Header, body []byte) events.APIGatewayV2HTTPResponse {
	out := events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{}}
	for k, vs := range h {
		if http.CanonicalHeaderKey(k) == "Set-Cookie" {
			out.Cookies = append(out.Cookies, vs...)
			continue
		}
		out.Headers[k] = strings.Join(vs, ",")
	}
	if utf8.Valid(body) {
		out.Body = string(body)
	} else {
		out.Body, out.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	return out
}
