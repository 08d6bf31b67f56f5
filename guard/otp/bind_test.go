package otp_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/localredis"
)

// TestACodeApprovesItsOwnPurposeAndAddressOnly: a code issued for an
// address and a purpose is no code for another purpose or another
// spelling of the mailbox, and leaves the one it was issued for pending:
// it approves it, once.
func TestACodeApprovesItsOwnPurposeAndAddressOnly(t *testing.T) {
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg := config.Default()
	cfg.Store.Timeout = 10 * time.Second // not about latency: room for a loaded machine
	codes, err := otp.New(cfg, redisstore.NewCodes(srv.Client()), []byte("a test secret of 32 bytes, padded"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ann := guard.Destination{Channel: message.Email, Address: "ann@example.com", Key: "ann@example.com"}
	other := guard.Destination{Channel: message.Email, Address: "ann+x@example.com", Key: "ann@example.com"}
	issued, err := codes.Issue(ctx, ann, "login", "")
	code := issued.Code
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		d       guard.Destination
		purpose string
		want    otp.Check
	}{{ann, "signup", otp.Missing}, {other, "login", otp.Missing}, {ann, "login", otp.Approved}, {ann, "login", otp.Missing}} {
		v, err := codes.Verify(ctx, c.d, c.purpose, code)
		if err != nil || v.Check != c.want {
			t.Errorf("the code for %s %s: %v %v, want %v", c.d.Address, c.purpose, v.Check, err, c.want)
		}
	}
}
