// Package awsjson calls AWS services that speak the JSON 1.1 protocol
// (Secrets Manager, SSM) with the SDK's own SigV4 signer and credentials,
// without their generated clients: the functions make two read calls, and
// the generated SSM client alone adds about 2 MB to every binary. It also
// is used the same way for SNS Publish (internal/delivery).
package awsjson

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Client calls one service.
type Client struct {
	cfg      aws.Config
	service  string // signing name and endpoint prefix: secretsmanager, ssm
	prefix   string // X-Amz-Target prefix: secretsmanager, AmazonSSM
	endpoint string
	http     *http.Client
	signer   *v4.Signer
}

// New returns a client of service (its signing name and endpoint prefix)
// whose operations are targetPrefix.Operation. cfg gives the region, the
// credentials and BaseEndpoint (AWS_ENDPOINT_URL).
func New(cfg aws.Config, service, targetPrefix string) *Client {
	ep := "https://" + service + "." + cfg.Region + ".amazonaws.com"
	if cfg.BaseEndpoint != nil {
		ep = strings.TrimSuffix(*cfg.BaseEndpoint, "/")
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	return &Client{cfg: cfg, service: service, prefix: targetPrefix, endpoint: ep + "/", http: hc, signer: v4.NewSigner()}
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", c.prefix+"."+operation)
	creds, err := c.cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("%s credentials: %w", c.service, err)
	}
	sum := sha256.Sum256(body)
	if err := c.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), c.service, c.cfg.Region, time.Now()); err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.service, operation, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.service, operation, err)
	}
	if resp.StatusCode/100 != 2 {
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
			code = resp.Header.Get("X-Amzn-ErrorType")
		}
		return &Error{Status: resp.StatusCode, Code: code, Message: e.Message + e.Msg}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}
