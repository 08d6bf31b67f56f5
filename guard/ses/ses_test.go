package ses_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/ses"
	"github.com/otpguard/otpguard/internal/awsfake"
	"github.com/otpguard/otpguard/templates"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func client(endpoint string) *sesv2.Client {
	return sesv2.NewFromConfig(aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")})
}

func message(t *testing.T, to, locale string) guard.Message {
	c, err := templates.Render("email", locale, templates.Data{Code: "042917", Purpose: "signup", TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return guard.Message{Channel: guard.Email, To: to, Purpose: "signup", Locale: locale, Code: "042917", Subject: c.Subject, Text: c.Text, HTML: c.HTML}
}

func TestSendEmailThroughTheSESv2Client(t *testing.T) {
	fake := awsfake.New()
	defer fake.Close()
	s, err := ses.New(client(fake.URL), "no-reply@otpguard.example", "otp")
	if err != nil {
		t.Fatal(err)
	}
	for _, loc := range templates.Locales() {
		if err := s.Send(context.Background(), message(t, "Ann@example.com", loc)); err != nil {
			t.Fatal(err)
		}
	}
	sent := fake.Emails()
	if len(sent) != len(templates.Locales()) {
		t.Fatalf("%d emails recorded", len(sent))
	}
	for i, loc := range templates.Locales() {
		e := sent[i]
		got := "from: " + e.From + "\nto: " + strings.Join(e.To, ",") + "\nconfiguration set: " + e.ConfigurationSet +
			"\nsubject: " + e.Subject + "\n--- text\n" + e.Text + "--- html\n" + e.HTML
		golden := "testdata/email-" + loc + ".golden"
		if *update {
			_ = os.WriteFile(golden, []byte(got), 0o644)
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("the email SES received differs from %s:\n%s", golden, got)
		}
	}
}

func TestSESErrorsAreMappedAndCarryNoCode(t *testing.T) {
	fake := awsfake.New()
	defer fake.Close()
	fake.Fail("rejected@example.com", "MessageRejected")
	fake.Fail("throttled@example.com", "TooManyRequestsException")
	fake.Fail("paused@example.com", "SendingPausedException")
	s, _ := ses.New(client(fake.URL), "no-reply@otpguard.example", "")
	down, _ := ses.New(client("http://127.0.0.1:1"), "no-reply@otpguard.example", "")
	for _, c := range []struct {
		s    *ses.Sender
		to   string
		want error
	}{
		{s, "rejected@example.com", guard.ErrUndeliverable},
		{s, "throttled@example.com", guard.ErrDeliveryUnavailable},
		{s, "paused@example.com", guard.ErrDeliveryUnavailable},
		{down, "ann@example.com", guard.ErrDeliveryUnavailable},
	} {
		err := c.s.Send(context.Background(), message(t, c.to, "en"))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.to, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "042917") || strings.Contains(err.Error(), c.to)) {
			t.Errorf("%s: the error leaks the code or address: %v", c.to, err)
		}
	}
	if _, err := ses.New(client(fake.URL), "", ""); err == nil {
		t.Error("ses.New accepted an empty From")
	}
}
