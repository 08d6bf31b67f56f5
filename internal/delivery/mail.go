package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/awsjson"
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
	*awsjson.Signed
	endpoint        string
	from, configSet string
}

// NewMailer sends from the verified identity from, in cfg's region (or
// at BaseEndpoint).
func NewMailer(cfg aws.Config, from, configurationSet string) (*Mailer, error) {
	if from == "" {
		return nil, errors.New("ses: a From address (a verified SES identity) is required")
	}
	return &Mailer{Signed: awsjson.NewSigned(cfg, "ses", 10*time.Second), endpoint: awsjson.Endpoint(cfg, "email") + "/v2/email/outbound-emails",
		from: from, configSet: configurationSet}, nil
}

type content struct {
	Data    string
	Charset string
}

// Send implements message.Sender.
func (m *Mailer) Send(ctx context.Context, msg message.Message) error {
	if msg.Channel != message.Email {
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
	status, header, _, err := m.Post(ctx, m.endpoint, "application/json", nil, body)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return fmt.Errorf("%w: ses: timed out", message.ErrUnavailable)
		}
		return fmt.Errorf("%w: ses: request failed", message.ErrUnavailable)
	}
	if status/100 == 2 {
		return nil
	}
	code, _, _ := strings.Cut(header.Get("X-Amzn-ErrorType"), ":")
	if code == "" {
		code = fmt.Sprintf("HTTP%d", status)
	}
	if code == "MessageRejected" {
		return fmt.Errorf("%w: ses %s", message.ErrUndeliverable, code)
	}
	return fmt.Errorf("%w: ses %s", message.ErrUnavailable, code)
}
