package awsjson

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Signed posts requests to one AWS service, signed with the SDK's SigV4
// signer and the configuration's credentials: what every lean call here
// and in internal/delivery shares.
type Signed struct {
	cfg     aws.Config
	service string // the signing name: secretsmanager, ssm, sns, ses
	http    *http.Client
	signer  *v4.Signer
}

// NewSigned returns a poster for service, each call bounded by timeout.
func NewSigned(cfg aws.Config, service string, timeout time.Duration) *Signed {
	return &Signed{cfg: cfg, service: service, http: &http.Client{Timeout: timeout}, signer: v4.NewSigner()}
}

// sign signs req (whose body is body) with SigV4 for the service and
// region, unless the configuration's credentials are anonymous: then the
// request goes unsigned, as the SDK sends it (Cognito's InitiateAuth and
// SignUp take no credentials). No credentials at all is an error.
func (s *Signed) sign(ctx context.Context, req *http.Request, body []byte) error {
	if _, anonymous := s.cfg.Credentials.(aws.AnonymousCredentials); anonymous {
		return nil
	}
	if s.cfg.Credentials == nil {
		return fmt.Errorf("%s: no credentials configured", s.service)
	}
	creds, err := s.cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("%s credentials: %w", s.service, err)
	}
	sum := sha256.Sum256(body)
	return s.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), s.service, s.cfg.Region, time.Now())
}

// Endpoint is the service's regional endpoint for host prefix (email for
// SES, the service name elsewhere), or cfg.BaseEndpoint when set
// (AWS_ENDPOINT_URL: a local endpoint in tests). The DNS suffix is the
// region's partition's, as the SDK's resolvers have it (amazonaws.com.cn
// in China, the ISO partitions'), as the template's ${AWS::Partition}
// ARNs do. The resolvers themselves live in the generated service
// packages, whose schema tables would add about 0.5 MB and init work per
// service to every function; the tests module checks this table against
// them for every partition and service otpguard calls.
func Endpoint(cfg aws.Config, prefix string) string {
	if cfg.BaseEndpoint != nil {
		return strings.TrimSuffix(*cfg.BaseEndpoint, "/")
	}
	return "https://" + prefix + "." + cfg.Region + "." + DNSSuffix(cfg.Region)
}

// partitions are the AWS partitions' region patterns and DNS suffixes
// (the SDK's partitions.json), most specific first.
var partitions = []struct {
	prefix, suffix string
}{
	{"cn-", "amazonaws.com.cn"},
	{"us-isob-", "sc2s.sgov.gov"},
	{"us-isof-", "csp.hci.ic.gov"},
	{"us-iso-", "c2s.ic.gov"},
	{"eu-isoe-", "cloud.adc-e.uk"},
	{"eusc-", "amazonaws.eu"},
}

// DNSSuffix is the DNS suffix of region's partition.
func DNSSuffix(region string) string {
	for _, p := range partitions {
		if strings.HasPrefix(region, p.prefix) {
			return p.suffix
		}
	}
	return "amazonaws.com" // aws and aws-us-gov
}

// Post sends body to url with the given content type and headers, signed,
// and returns the status, the headers and at most 1 MiB of the answer.
// A failure to reach the service is returned as it is (it wraps
// context.DeadlineExceeded on a timeout).
func (s *Signed) Post(ctx context.Context, url, contentType string, header map[string]string, body []byte) (int, http.Header, []byte, error) {
	return s.Do(ctx, http.MethodPost, url, contentType, header, body)
}

// Do is Post with any method (body nil: none).
func (s *Signed) Do(ctx context.Context, method, url, contentType string, header map[string]string, body []byte) (int, http.Header, []byte, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if err := s.sign(ctx, req, body); err != nil {
		return 0, nil, nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, raw, err
}
