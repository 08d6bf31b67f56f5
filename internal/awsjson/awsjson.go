// Package awsjson calls AWS services that speak the JSON 1.1 protocol
// (Secrets Manager, SSM) with the SDK's own SigV4 signer and credentials,
// without their generated clients: the functions make two read calls, and
// the generated SSM client alone adds about 2 MB to every binary. Signed
// (signed.go) is the signed POST they share with internal/delivery's SES
// and SNS calls.
package awsjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Client calls one service.
type Client struct {
	*Signed
	prefix   string // X-Amz-Target prefix: secretsmanager, AmazonSSM
	endpoint string
}

// New returns a client of service (its signing name and endpoint prefix)
// whose operations are targetPrefix.Operation. cfg gives the region, the
// credentials and BaseEndpoint (AWS_ENDPOINT_URL).
func New(cfg aws.Config, service, targetPrefix string) *Client {
	return &Client{Signed: NewSigned(cfg, service, 5*time.Second), prefix: targetPrefix, endpoint: Endpoint(cfg, service) + "/"}
}

// Error is the service's answer to a failed call.
type Error struct {
	Status  int
	Code    string // ResourceNotFoundException, ParameterNotFound, ...
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message) }

// Is the error code?
func Is(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Call runs operation with in (marshalled to JSON) and decodes the answer
// into out. Throttling and 5xx answers are retried once.
func (c *Client) Call(ctx context.Context, operation string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		last = c.call(ctx, operation, body, out)
		var e *Error
		if last == nil || (errors.As(last, &e) && e.Status < 500 && !strings.Contains(e.Code, "Throttl")) {
			return last
		}
		if ctx.Err() != nil {
			return last
		}
	}
	return last
}

func (c *Client) call(ctx context.Context, operation string, body []byte, out any) error {
	status, header, raw, err := c.Post(ctx, c.endpoint, "application/x-amz-json-1.1", map[string]string{"X-Amz-Target": c.prefix + "." + operation}, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.service, operation, err)
	}
	if status/100 != 2 {
		var e struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
			Msg     string `json:"Message"`
		}
		_ = json.Unmarshal(raw, &e)
		code := e.Type
		if i := strings.LastIndexByte(code, '#'); i >= 0 {
			code = code[i+1:]
		}
		if code == "" {
			code = header.Get("X-Amzn-ErrorType")
		}
		return &Error{Status: status, Code: code, Message: e.Message + e.Msg}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}
