package queue

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/redis/go-redis/v9"
)

// TestASlotsKeyIsItsDefinition: a message's ledger key is what every
// version has named its slot by (96 bits of HMAC-SHA256 of the channel
// and the slot under the secret's "delivery-queue key"), the same from
// goroutines at once, so a send after a deploy supersedes the message
// queued before it.
func TestASlotsKeyIsItsDefinition(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	q, err := New(Host{Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Secret: secret}, NewLocal(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := func(m message.Message) string {
		mac := hmac.New(sha256.New, guard.DeriveKey(secret, "delivery-queue key"))
		mac.Write([]byte(string(m.Channel) + "\x00" + m.Slot))
		return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:12])
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				m := message.Message{Channel: message.SMS, Slot: "otp\x00+4479460" + strconv.Itoa(w*1000+i) + "\x00login"}
				if i%2 == 1 {
					m.Channel = message.Email
				}
				if got := q.key(m, "id"); got != want(m) {
					t.Errorf("key(%q) = %s, want %s", m.Slot, got, want(m))
					return
				}
			}
		})
	}
	wg.Wait()
	if got := q.key(message.Message{Channel: message.SMS}, "abc"); got != "nabc" {
		t.Fatalf("a message without a slot: %s", got)
	}
}
