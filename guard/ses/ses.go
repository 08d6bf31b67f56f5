// Package ses sends verification emails with Amazon SES (API v2,
// SendEmail), the rendered HTML and text in one message.
package ses

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sesv2/types"
	"github.com/aws/smithy-go"

	"github.com/otpguard/otpguard/guard"
)

// API is the part of the SES v2 client the sender uses.
type API interface {
	SendEmail(ctx context.Context, in *sesv2.SendEmailInput, opts ...func(*sesv2.Options)) (*sesv2.SendEmailOutput, error)
}

// Sender sends email through SES.
type Sender struct {
	api  API
	from string
	// configurationSet, when set, names the SES configuration set (event
	// publishing, suppression settings).
	configurationSet string
}

// New returns a Sender that sends from the verified identity from.
func New(api API, from, configurationSet string) (*Sender, error) {
	if from == "" {
		return nil, errors.New("ses: a From address (a verified SES identity) is required")
	}
	return &Sender{api: api, from: from, configurationSet: configurationSet}, nil
}

// Send implements api.Sender. Errors carry the SES error code only, never
// the provider's message text, so nothing of the message can leak.
func (s *Sender) Send(ctx context.Context, m guard.Message) error {
	if m.Channel != guard.Email {
		return fmt.Errorf("ses: cannot send %s", m.Channel)
	}
	in := &sesv2.SendEmailInput{
		FromEmailAddress: aws.String(s.from),
		Destination:      &types.Destination{ToAddresses: []string{m.To}},
		Content: &types.EmailContent{Simple: &types.Message{
			Subject: &types.Content{Data: aws.String(m.Subject), Charset: aws.String("UTF-8")},
			Body: &types.Body{
				Text: &types.Content{Data: aws.String(m.Text), Charset: aws.String("UTF-8")},
				Html: &types.Content{Data: aws.String(m.HTML), Charset: aws.String("UTF-8")},
			},
		}},
	}
	if s.configurationSet != "" {
		in.ConfigurationSetName = aws.String(s.configurationSet)
	}
	if _, err := s.api.SendEmail(ctx, in); err != nil {
		return classify(err)
	}
	return nil
}

// classify maps an SES error: a rejected message or recipient is
// undeliverable; throttling, a paused account and everything else are the
// provider being unavailable.
func classify(err error) error {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: ses: timed out", guard.ErrDeliveryUnavailable)
		}
		return fmt.Errorf("%w: ses: request failed", guard.ErrDeliveryUnavailable)
	}
	var rejected *types.MessageRejected
	if errors.As(err, &rejected) {
		return fmt.Errorf("%w: ses %s", guard.ErrUndeliverable, ae.ErrorCode())
	}
	return fmt.Errorf("%w: ses %s", guard.ErrDeliveryUnavailable, ae.ErrorCode())
}
