package delivery

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"
	"github.com/otpguard/otpguard/internal/awsjson"
)

// Publisher is SNS Publish over the query protocol, signed with the SDK's
// SigV4 signer: the SDK's own input, output and error types (delivery/sns
// uses it as it would the generated client), without the generated
// client's middleware stack (about 260 KB of the send function).
type Publisher struct {
	*awsjson.Signed
	endpoint string
}

// NewPublisher returns SNS Publish in cfg's region (or at BaseEndpoint).
func NewPublisher(cfg aws.Config) *Publisher {
	return &Publisher{Signed: awsjson.NewSigned(cfg, "sns", 10*time.Second), endpoint: awsjson.Endpoint(cfg, "sns") + "/"}
}

// Publish sends in: a phone number or a target ARN, the message and its
// string attributes. Errors are smithy.APIError values, typed as the
// generated client types them for InvalidParameter and
// ParameterValueInvalid.
func (p *Publisher) Publish(ctx context.Context, in *sns.PublishInput, _ ...func(*sns.Options)) (*sns.PublishOutput, error) {
	form := url.Values{"Action": {"Publish"}, "Version": {"2010-03-31"}, "Message": {aws.ToString(in.Message)}}
	for k, v := range map[string]*string{"PhoneNumber": in.PhoneNumber, "TargetArn": in.TargetArn, "TopicArn": in.TopicArn, "Subject": in.Subject} {
		if v != nil {
			form.Set(k, *v)
		}
	}
	names := make([]string, 0, len(in.MessageAttributes))
	for name := range in.MessageAttributes {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		a := in.MessageAttributes[name]
		prefix := "MessageAttributes.entry." + strconv.Itoa(i+1)
		form.Set(prefix+".Name", name)
		form.Set(prefix+".Value.DataType", aws.ToString(a.DataType))
		form.Set(prefix+".Value.StringValue", aws.ToString(a.StringValue))
	}
	status, _, raw, err := p.Post(ctx, p.endpoint, "application/x-www-form-urlencoded; charset=utf-8", nil, []byte(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("sns Publish: %w", err)
	}
	if status/100 != 2 {
		var e struct {
			Error struct{ Code, Message string } `xml:"Error"`
		}
		_ = xml.Unmarshal(raw, &e)
		msg := aws.String(e.Error.Message)
		switch e.Error.Code {
		case "InvalidParameter":
			return nil, &types.InvalidParameterException{Message: msg}
		case "ParameterValueInvalid":
			return nil, &types.InvalidParameterValueException{Message: msg}
		case "":
			return nil, &smithy.GenericAPIError{Code: "HTTP" + strconv.Itoa(status), Message: "no error code"}
		}
		return nil, &smithy.GenericAPIError{Code: e.Error.Code, Message: e.Error.Message}
	}
	var out struct {
		Result struct{ MessageId string } `xml:"PublishResult"`
	}
	if err := xml.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("sns Publish answer: %w", err)
	}
	return &sns.PublishOutput{MessageId: aws.String(out.Result.MessageId)}, nil
}
