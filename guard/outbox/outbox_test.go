package outbox_test

import (
	"context"
	"os"
	"time"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/outbox"
)

func Example() {
	at := time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)
	o := outbox.New(os.Stdout, func() time.Time { return at })
	_ = o.Send(context.Background(), message.Message{
		Channel: message.Email, To: "Ann@example.com", Purpose: "signup", Code: "042917",
		Subject: "042917 is your sign-up code", Text: "Your sign-up code is: 042917",
	})
	// Output:
	// {"channel":"email","to":"Ann@example.com","purpose":"signup","code":"042917","body":"Your sign-up code is: 042917","sentAt":"2026-11-21T09:30:00Z"}
}
