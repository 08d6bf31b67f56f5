package delivery

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

	"github.com/otpguard/otpguard/guard"
)

// Mailer is SES v2 SendEmail (REST-JSON, POST /v2/email/outbound-emails)
// signed with the SDK's SigV4 signer and credentials, without the
// generated client, whose schema tables cost the send function about
// 0.7 ms of init and half a megabyte. It answers as guard/ses does (that
// package keeps the SDK-client sender for library users): a rejected
// message or recipient is undeliverable; throttling, a paused account
// and anything else is the provider being unavailable. Errors carry the
// SES error code only.
type Mailer struct {
	cfg             aws.Config
	endpoint        string
	from, configSet string
	http            *http.Client
	signer          *v4.Signer
}

// NewMailer sends from the verified identity from, in cfg's region (or
// at BaseEndpoint).
func NewMailer(cfg aws.Config, from, configurationSet string) (*Mailer, error) {
	if from == "" {
		return nil, errors.New("ses: a From address (a verified SES identity) is required")
	}
	ep := "https://email." + cfg.Region + ".amazonaws.com"
	if cfg.BaseEndpoint != nil {
		ep = strings.TrimSuffix(*cfg.BaseEndpoint, "/")
	}
	return &Mailer{cfg: cfg, endpoint: ep + "/v2/email/outbound-emails", from: from, configSet: configurationSet,
		http: &http.Client{Timeout: 10 * time.Second}, signer: v4.NewSigner()}, nil
}

type content struct {
	Data    string
	Charset string
}

// Send implements api.Sender.
func (m *Mailer) Send(ctx context.Context, msg guard.Message) error {
	if msg.Channel != guard.Email {
		return fmt.Errorf("ses: cannot send %s", msg.Channel)
	}
	in := map[string]any{
		"FromEmailAddress": m.from,
		"Destination":      map[string]any{"ToAddresses": []string{msg.To}},
		"Content": map[string]any{"Simple": map[string]any{
			"Subject": content{msg.Subject, "UTF-8"},
			"Body":    map[string]any{"Text": content{msg.Text, "UTF-8"}, "Html": content{msg.HTML, "UTF-8"}},
		}},
	}
	if m.configSet != "" {
		in["ConfigurationSetName"] = m.configSet
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	creds, err := m.cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("%w: ses: credentials", guard.ErrDeliveryUnavailable)
	}
	sum := sha256.Sum256(body)
	if err := m.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "ses", m.cfg.Region, time.Now()); err != nil {
		return err
	}
	resp, err := m.http.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return fmt.Errorf("%w: ses: timed out", guard.ErrDeliveryUnavailable)
		}
		return fmt.Errorf("%w: ses: request failed", guard.ErrDeliveryUnavailable)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	code, _, _ := strings.Cut(resp.Header.Get("X-Amzn-ErrorType"), ":")
	if code == "" {
		code = fmt.Sprintf("HTTP%d", resp.StatusCode)
	}
	if code == "MessageRejected" {
		return fmt.Errorf("%w: ses %s", guard.ErrUndeliverable, code)
	}
	return fmt.Errorf("%w: ses %s", guard.ErrDeliveryUnavailable, code)
}
