// Package awsjson is otpguard's one home for AWS calls: the SDK
// configuration from the environment (Config), the endpoint table
// (Endpoint), one signing path (Signed: the SDK's own SigV4 signer and
// credentials) and the JSON protocol's calls (Client) — without the
// generated clients, whose middleware and schema tables add megabytes to
// every binary (the SSM client alone about 2 MB). Every AWS call of the
// product goes through it: Secrets Manager, SSM, KMS, EventBridge,
// Cognito, CloudWatch (JSON), SES v2 (REST JSON), SNS and SQS (query) in
// internal/delivery, and the console's signed calls to the stack's API.
package awsjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Client calls one service.
type Client struct {
	*Signed
	prefix      string // X-Amz-Target prefix: secretsmanager, AmazonSSM
	endpoint    string
	contentType string // the protocol's version
	queryMode   bool   // a query-compatible service (CloudWatch): its errors keep the query protocol's codes
}

// New returns a client of service (its signing name and endpoint prefix)
// whose operations are targetPrefix.Operation in the JSON 1.1 protocol.
// cfg gives the region, the credentials and BaseEndpoint
// (AWS_ENDPOINT_URL).
func New(cfg aws.Config, service, targetPrefix string) *Client {
	return &Client{Signed: NewSigned(cfg, service, 5*time.Second), prefix: targetPrefix, endpoint: Endpoint(cfg, service) + "/",
		contentType: "application/x-amz-json-1.1"}
}

// New10 is New for a query-compatible service of the JSON 1.0 protocol
// (CloudWatch): the requests say so (x-amzn-query-mode), as AWS's SDKs
// send them, so that its errors keep the codes its query protocol has.
func New10(cfg aws.Config, service, targetPrefix string) *Client {
	c := New(cfg, service, targetPrefix)
	c.contentType, c.queryMode = "application/x-amz-json-1.0", true
	return c
}

// Error is the service's answer to a failed call.
type Error struct {
	Status  int
	Code    string // ResourceNotFoundException, ParameterNotFound, ...
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message) }

// ErrorCode is the service's error code (as the SDK's smithy.APIError
// names it), for callers that classify errors without importing this
// package.
func (e *Error) ErrorCode() string { return e.Code }

// Is the error code?
func Is(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Call runs operation with in (marshalled to JSON) and decodes the answer
// into out. A throttling or 5xx answer is retried once, after 50 ms; a
// call without an answer (a timeout, a connection lost) never is: it may
// have run (a login counted twice by Cognito).
func (c *Client) Call(ctx context.Context, operation string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	err = c.call(ctx, operation, body, out)
	var e *Error
	if err == nil || !errors.As(err, &e) || (e.Status < 500 && !strings.Contains(e.Code, "Throttl")) {
		return err
	}
	select {
	case <-time.After(50 * time.Millisecond):
	case <-ctx.Done():
		return err
	}
	return c.call(ctx, operation, body, out)
}

// errorCode is a failed answer's error code, as AWS's SDKs read it: the
// X-Amzn-ErrorType header, else the body's code, else its __type; cut at
// a ':' (a URI after it) and after a '#' (a namespace before it). A
// query-compatible service's x-amzn-query-error code comes first.
func errorCode(header http.Header, code, typ string) string {
	if q, _, _ := strings.Cut(header.Get("X-Amzn-Query-Error"), ";"); q != "" {
		return q
	}
	c := header.Get("X-Amzn-ErrorType")
	if c == "" {
		c = code
	}
	if c == "" {
		c = typ
	}
	c, _, _ = strings.Cut(c, ":")
	if i := strings.LastIndexByte(c, '#'); i >= 0 {
		c = c[i+1:]
	}
	return strings.TrimSpace(c)
}

func (c *Client) call(ctx context.Context, operation string, body []byte, out any) error {
	h := map[string]string{"X-Amz-Target": c.prefix + "." + operation}
	if c.queryMode {
		h["X-Amzn-Query-Mode"] = "true"
	}
	status, header, raw, err := c.Post(ctx, c.endpoint, c.contentType, h, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.service, operation, err)
	}
	if status/100 != 2 {
		var e struct {
			Type    string `json:"__type"`
			Code    string `json:"code"`
			Message string `json:"message"`
			Msg     string `json:"Message"`
		}
		_ = json.Unmarshal(raw, &e)
		return &Error{Status: status, Code: errorCode(header, e.Code, e.Type), Message: e.Message + e.Msg}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}
