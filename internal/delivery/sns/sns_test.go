package sns_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/internal/delivery/sns"
	"github.com/otpguard/otpguard/internal/testonly/awsfake"
	"github.com/otpguard/otpguard/templates"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func smsTo(t *testing.T, to, locale string) message.Message {
	c, err := templates.Render("sms", locale, templates.Data{Code: "042917", Purpose: "login", TTL: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return message.Message{Channel: message.SMS, To: to, Purpose: "login", Locale: locale, Code: "042917", Text: c.Text}
}

func TestPublishAnSMS(t *testing.T) {
	fake := awsfake.New()
	defer fake.Close()
	s := sns.New(awsfake.Config(fake.URL), sns.Options{SenderID: "OTPGUARD", MaxPrice: "0.50"})
	for _, loc := range templates.Locales() {
		if err := s.Send(context.Background(), smsTo(t, "+447911123456", loc)); err != nil {
			t.Fatal(err)
		}
	}
	sent := fake.SMS()
	if len(sent) != len(templates.Locales()) {
		t.Fatalf("%d SMS recorded", len(sent))
	}
	for i, loc := range templates.Locales() {
		m := sent[i]
		var attrs []string
		for k, v := range m.Attributes {
			attrs = append(attrs, k+"="+v)
		}
		slices.Sort(attrs)
		got := fmt.Sprintf("to: %s\nattributes: %s\n--- message\n%s\n", m.PhoneNumber, strings.Join(attrs, " "), m.Message)
		golden := "testdata/sms-" + loc + ".golden"
		if *update {
			_ = os.WriteFile(golden, []byte(got), 0o644)
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("the SMS SNS received differs from %s:\n%s", golden, got)
		}
	}
}

func TestSNSErrorsAreMappedAndCarryNoCode(t *testing.T) {
	fake := awsfake.New()
	defer fake.Close()
	fake.Fail("+15005550001", "InvalidParameter")
	fake.Fail("+15005550002", "Throttling")
	s := sns.New(awsfake.Config(fake.URL), sns.Options{})
	for to, want := range map[string]error{"+15005550001": message.ErrUndeliverable, "+15005550002": message.ErrUnavailable} {
		err := s.Send(context.Background(), smsTo(t, to, "en"))
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", to, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "042917") || strings.Contains(err.Error(), to)) {
			t.Errorf("%s: the error leaks the code or number: %v", to, err)
		}
	}
	down := sns.New(awsfake.Config("http://127.0.0.1:1"), sns.Options{})
	if err := down.Send(context.Background(), smsTo(t, "+447911123456", "en")); !errors.Is(err, message.ErrUnavailable) {
		t.Errorf("endpoint down: %v", err)
	}
}
