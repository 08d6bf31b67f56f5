// Package delivery builds the send function's SES and SNS senders from
// its environment: SES v2 SendEmail and SNS Publish, each signed with the
// SDK's SigV4 signer (mail.go, publish.go). Only the send function links
// it.
package delivery

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/pacer"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	otpsns "github.com/otpguard/otpguard/internal/delivery/sns"
)

// Senders builds the send function's SES and SNS senders, each bounded by
// PROVIDER_TIMEOUT and paced to its quota across every container through
// Redis, waiting at most DELIVERY_MAX_WAIT for a turn. With DELIVERY_MODE
// queue they are the deliver function's, and the others queue every
// message in DELIVERY_QUEUE_URL instead (see package queue), refusing
// sends while more than DELIVERY_QUEUE_MAX_DEPTH wait.
func Senders(getenv func(string) string, cfg aws.Config) (func(queue.Host) (message.Sender, error), error) {
	var errs []error
	sqs := queueOf(getenv, cfg, &errs)
	maxWait := duration(getenv, "DELIVERY_MAX_WAIT", 2*time.Second, &errs)
	timeout := duration(getenv, "PROVIDER_TIMEOUT", 5*time.Second, &errs)
	var emailRate, smsRate int64
	var email, sms message.Sender
	{
		emailRate = positive(getenv, "EMAIL_PER_SECOND", 1, &errs)
		e, err := NewMailer(cfg, getenv("SES_FROM"), getenv("SES_CONFIGURATION_SET"))
		if err != nil {
			errs = append(errs, fmt.Errorf("SES_FROM: %w", err))
		}
		email = e
	}
	{
		smsRate = positive(getenv, "SMS_PER_SECOND", 20, &errs)
		sms = otpsns.New(cfg, otpsns.Options{
			SenderID: getenv("SMS_SENDER_ID"), OriginationNumber: getenv("SMS_ORIGINATION_NUMBER"), MaxPrice: getenv("SMS_MAX_PRICE"),
		})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return func(h queue.Host) (message.Sender, error) {
		if sqs != nil {
			return queue.New(h, sqs, queue.Options{MaxDepth: sqs.Cap, Rate: map[message.Channel]int64{message.Email: emailRate, message.SMS: smsRate}})
		}
		by := api.ByChannel{}
		for ch, s := range map[message.Channel]struct {
			sender message.Sender
			name   string
			rate   int64
		}{message.Email: {email, "ses", emailRate}, message.SMS: {sms, "sms", smsRate}} {
			if s.sender == nil {
				continue
			}
			pacer, err := pacer.New(h.Store, s.name, s.rate, time.Second, time.Second)
			if err != nil {
				return nil, err
			}
			by[ch] = api.Paced(api.Timed(s.sender, timeout), pacer, maxWait)
		}
		return by, nil
	}, nil
}

// queueOf is the SQS queue of DELIVERY_MODE queue (its Cap
// DELIVERY_QUEUE_MAX_DEPTH), or nil in direct mode.
func queueOf(getenv func(string) string, cfg aws.Config, errs *[]error) *SQS {
	switch mode := getenv("DELIVERY_MODE"); mode {
	case "", "direct":
		return nil
	case "queue":
	default:
		*errs = append(*errs, fmt.Errorf("DELIVERY_MODE: want direct or queue, got %q", mode))
		return nil
	}
	maxDepth := positive(getenv, "DELIVERY_QUEUE_MAX_DEPTH", 6000, errs)
	url := getenv("DELIVERY_QUEUE_URL")
	if url == "" {
		*errs = append(*errs, errors.New("DELIVERY_QUEUE_URL: required with DELIVERY_MODE queue"))
		return nil
	}
	sqs := NewSQS(cfg, url)
	sqs.Cap = maxDepth
	return sqs
}

func positive(getenv func(string) string, name string, def int64, errs *[]error) int64 {
	v := getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		*errs = append(*errs, fmt.Errorf("%s: want a whole number ≥ 1, got %q", name, v))
	}
	return n
}

func duration(getenv func(string) string, name string, def time.Duration, errs *[]error) time.Duration {
	v := getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		*errs = append(*errs, fmt.Errorf("%s: want a duration such as 2s, got %q", name, v))
	}
	return d
}
