// Package sns sends verification SMS with Amazon SNS Publish to a phone
// number, as transactional messages: the query protocol's Publish,
// signed through internal/awsjson (the generated client's middleware
// stack would add about 260 KB to the send function).
package sns

import (
	"context"
	"encoding/xml"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/awsjson"
)

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
	post     *awsjson.Signed
	endpoint string
	opts     Options
}

// New returns a Sender publishing in cfg's region (or at its
// BaseEndpoint), each call bounded by 10 seconds.
func New(cfg aws.Config, opts Options) *Sender {
	return &Sender{post: awsjson.NewSigned(cfg, "sns", 10*time.Second), endpoint: awsjson.Endpoint(cfg, "sns") + "/", opts: opts}
}

// Send implements message.Sender. Errors carry the SNS error code only.
func (s *Sender) Send(ctx context.Context, m message.Message) error {
	if m.Channel != message.SMS {
		return fmt.Errorf("sns: cannot send %s", m.Channel)
	}
	attrs := map[string]string{"AWS.SNS.SMS.SMSType": "Transactional"}
	for name, v := range map[string]string{
		"AWS.SNS.SMS.SenderID": s.opts.SenderID, "AWS.MM.SMS.OriginationNumber": s.opts.OriginationNumber,
		"AWS.SNS.SMS.MaxPrice": s.opts.MaxPrice,
	} {
		if v != "" {
			attrs[name] = v
		}
	}
	form := url.Values{"Action": {"Publish"}, "Version": {"2010-03-31"}, "PhoneNumber": {m.To}, "Message": {m.Text}}
	for i, name := range slices.Sorted(maps.Keys(attrs)) {
		prefix := "MessageAttributes.entry." + strconv.Itoa(i+1)
		form.Set(prefix+".Name", name)
		form.Set(prefix+".Value.DataType", "String")
		form.Set(prefix+".Value.StringValue", attrs[name])
	}
	status, _, raw, err := s.post.Post(ctx, s.endpoint, "application/x-www-form-urlencoded; charset=utf-8", nil, []byte(form.Encode()))
	if err != nil {
		return fmt.Errorf("%w: sns: request failed", message.ErrUnavailable)
	}
	if status/100 == 2 {
		return nil
	}
	var e struct {
		Error struct{ Code string } `xml:"Error"`
	}
	_ = xml.Unmarshal(raw, &e)
	return classify(e.Error.Code, status)
}

// classify maps an SNS error code: an invalid number or parameter is
// undeliverable; throttling and everything else are the provider being
// unavailable.
func classify(code string, status int) error {
	switch code {
	case "InvalidParameter", "ParameterValueInvalid":
		return fmt.Errorf("%w: sns %s", message.ErrUndeliverable, code)
	case "":
		return fmt.Errorf("%w: sns HTTP %d", message.ErrUnavailable, status)
	}
	return fmt.Errorf("%w: sns %s", message.ErrUnavailable, code)
}
