package delivery_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/delivery"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
)

func TestMailerIsTheSESClientsEquivalent(t *testing.T) {
	fake := awsfake.New()
	defer fake.Close()
	fake.Fail("rejected@example.com", "MessageRejected")
	fake.Fail("throttled@example.com", "TooManyRequestsException")
	m, err := delivery.NewMailer(awsfake.Config(fake.URL), "no-reply@otpguard.example", "otp-set")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msg := message.Message{Channel: message.Email, To: "ann@example.com", Subject: "123456 is your code", Text: "text 123456", HTML: "<p>123456</p>"}
	if err := m.Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
	sent := fake.Emails()
	if len(sent) != 1 || sent[0].From != "no-reply@otpguard.example" || sent[0].To[0] != "ann@example.com" || sent[0].Subject != msg.Subject ||
		sent[0].Text != msg.Text || sent[0].HTML != msg.HTML || sent[0].ConfigurationSet != "otp-set" {
		t.Errorf("sent %+v", sent)
	}
	msg.To = "rejected@example.com"
	if err := m.Send(ctx, msg); !errors.Is(err, message.ErrUndeliverable) {
		t.Errorf("MessageRejected: %v, want undeliverable", err)
	}
	msg.To = "throttled@example.com"
	if err := m.Send(ctx, msg); !errors.Is(err, message.ErrUnavailable) || strings.Contains(err.Error(), "123456") {
		t.Errorf("throttled: %v, want delivery unavailable without the code", err)
	}
	if _, err := delivery.NewMailer(awsfake.Config(fake.URL), "", ""); err == nil {
		t.Error("no From address accepted")
	}
}
