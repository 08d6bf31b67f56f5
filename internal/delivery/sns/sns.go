// Package sns sends verification SMS with Amazon SNS Publish to a phone
// number, as transactional messages.
package sns

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"

	"github.com/otpguard/otpguard/guard/message"
)

// API is the part of the SNS client the sender uses.
type API interface {
	Publish(ctx context.Context, in *sns.PublishInput, opts ...func(*sns.Options)) (*sns.PublishOutput, error)
}

// Options are the SMS attributes SNS sends with each message; all
// optional.
type Options struct {
	// SenderID is the alphanumeric sender id, where countries allow one.
	SenderID string
	// OriginationNumber is the number (E.164) to send from.
	OriginationNumber string
	// MaxPrice caps the price in USD of one message ("0.50").
	MaxPrice string
}

// Sender sends SMS through SNS.
type Sender struct {
	api  API
	opts Options
}

// New returns a Sender.
func New(api API, opts Options) *Sender { return &Sender{api: api, opts: opts} }

// Send implements message.Sender. Errors carry the SNS error code only.
func (s *Sender) Send(ctx context.Context, m message.Message) error {
	if m.Channel != message.SMS {
		return fmt.Errorf("sns: cannot send %s", m.Channel)
	}
	attrs := map[string]types.MessageAttributeValue{
		"AWS.SNS.SMS.SMSType": {DataType: aws.String("String"), StringValue: aws.String("Transactional")},
	}
	for name, v := range map[string]string{
		"AWS.SNS.SMS.SenderID": s.opts.SenderID, "AWS.MM.SMS.OriginationNumber": s.opts.OriginationNumber,
		"AWS.SNS.SMS.MaxPrice": s.opts.MaxPrice,
	} {
		if v != "" {
			attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	_, err := s.api.Publish(ctx, &sns.PublishInput{PhoneNumber: aws.String(m.To), Message: aws.String(m.Text), MessageAttributes: attrs})
	if err != nil {
		return classify(err)
	}
	return nil
}

// classify maps an SNS error: an invalid number or parameter is
// undeliverable; throttling and everything else are the provider being
// unavailable.
func classify(err error) error {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return fmt.Errorf("%w: sns: request failed", message.ErrUnavailable)
	}
	var invalid *types.InvalidParameterException
	var invalidValue *types.InvalidParameterValueException
	if errors.As(err, &invalid) || errors.As(err, &invalidValue) {
		return fmt.Errorf("%w: sns %s", message.ErrUndeliverable, ae.ErrorCode())
	}
	return fmt.Errorf("%w: sns %s", message.ErrUnavailable, ae.ErrorCode())
}
