package queue

import (
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/templates"
)

// BenchmarkSealOpen is a queued email's job sealed by the queue and
// opened by the deliverer (on SQS, the send and deliver functions; the
// local server's in-process queue does neither).
func BenchmarkSealOpen(b *testing.B) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	aead, err := sealer(guard.DeriveKey(secret, SealLabel))
	if err != nil {
		b.Fatal(err)
	}
	q := &Queue{seal: aead}
	c, err := templates.Render("email", "", templates.Data{Code: "123456", Purpose: "login", TTL: 10 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	job := Job{ID: newID(), Key: "dGhlIGtleSBvZiBhIHNsb3Q", Expires: 1893456000000, Message: message.Message{
		Channel: message.Email, To: "someone@example.com", Purpose: "login", Code: "123456", Subject: c.Subject, Text: c.Text, HTML: c.HTML,
		Slot: "otp\x00someone@example.com\x00login", TTL: 10 * time.Minute, Receipt: "otp-send-per-destination,AAAAAAAAAAAAAAAAAAAAAA,1893456000000000,1"}}
	b.ReportAllocs()
	for b.Loop() {
		body, err := q.sealJob(job)
		if err != nil {
			b.Fatal(err)
		}
		if got, err := open(aead, body); err != nil || got.Message != job.Message {
			b.Fatalf("%v %+v", err, got)
		}
	}
}
