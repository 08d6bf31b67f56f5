package guard_test

import (
	"context"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/message"
)

// TestAReceiptSettlesEveryRuleItTook: a receipt, settled
// by another request that knows nothing of the attempt's subject, gives
// back every failure-counting rule's take, a distinct rule's member
// included (a receipt without it removes nothing from the set); settled
// again, or as a void attempt twice, it gives back nothing more than was
// taken.
func TestAReceiptSettlesEveryRuleItTook(t *testing.T) {
	cfg, err := config.Parse([]byte(`rules:
  - {name: accounts-per-ip, action: login, key: [ip], algorithm: distinct, of: account, count: failures, limit: 3, window: 1h}
  - {name: per-account, action: login, key: [account], count: failures, limit: 2, window: 1h}
  - {name: ratio-per-ip16, action: login, key: [ip/16], algorithm: ratio, limit: 80%, min: 2, window: 1h}
  - {name: pair, action: login, key: [account, ip], count: failures, limit: 5, window: 15m, resetOnSuccess: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), memstore.New(time.Now), guard.Options{Secret: []byte("a test secret of 32 bytes, padded"), Backstop: memstore.New(time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ip := netip.MustParseAddr("198.51.100.7")
	remaining := func(dim string, s guard.Subject) map[string]int64 {
		st, err := g.Status(ctx, dim, s)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, x := range st {
			out[x.Rule] = x.Remaining
		}
		return out
	}
	fresh := remaining("ip", guard.Subject{IP: ip})["accounts-per-ip"]
	req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann", IP: ip}, Partial: true}
	d, err := g.Allow(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	receipt := g.Receipt(d)
	if n := len(strings.Fields(receipt)); n != 4 {
		t.Fatalf("receipt %q names %d rules, want 4", receipt, n)
	}
	for _, e := range strings.Fields(receipt) {
		if f := strings.Split(e, ","); len(f) != 6 || (f[0] == "accounts-per-ip") != (f[4] != "") {
			t.Errorf("entry %q: the distinct rule's member, and only it, is its fifth field", e)
		}
	}
	if strings.Contains(receipt, "ann") || strings.Contains(receipt, "198.51") {
		t.Errorf("the receipt holds a clear identifier: %q", receipt)
	}
	if got := remaining("ip", guard.Subject{IP: ip})["accounts-per-ip"]; got != fresh-1 {
		t.Fatalf("accounts-per-ip: %d left after the attempt, want %d (the check could not fail)", got, fresh-1)
	}
	if got := remaining("account", guard.Subject{Account: "ann"})["per-account"]; got != 1 {
		t.Fatalf("per-account: %d left after the attempt, want 1", got)
	}
	if err := g.SettleReceipt(ctx, receipt, guard.Success); err != nil {
		t.Fatal(err)
	}
	if got := remaining("ip", guard.Subject{IP: ip})["accounts-per-ip"]; got != fresh {
		t.Errorf("accounts-per-ip: %d left after the settle, want %d (the member removed)", got, fresh)
	}
	if got := remaining("account", guard.Subject{Account: "ann"})["per-account"]; got != 2 {
		t.Errorf("per-account: %d left after the settle, want 2", got)
	}
	// a void attempt gives back the same, the ratio's attempt included
	if d, err = g.Allow(ctx, req); err != nil || !d.Allowed {
		t.Fatal(err)
	}
	if err := g.SettleReceipt(ctx, g.Receipt(d), guard.Void); err != nil {
		t.Fatal(err)
	}
	if got := remaining("ip", guard.Subject{IP: ip})["accounts-per-ip"]; got != fresh {
		t.Errorf("accounts-per-ip: %d left after a void attempt, want %d", got, fresh)
	}
	for _, bad := range []string{"x", "a,b,c", "per-account,AAAAAAAAAAAAAAAAAAAAAA,1,0", "per-account,AAAAAAAAAAAAAAAAAAAAAA,x,1",
		"per-account,AAAAAAAAAAAAAAAAAAAAAA,1,1,,z"} {
		if err := g.SettleReceipt(ctx, bad, guard.Success); err == nil {
			t.Errorf("%q settled", bad)
		}
	}
	if err := g.SettleReceipt(ctx, receipt, guard.Failure); err == nil {
		t.Error("a receipt settled as a failure")
	}
}

// TestAVoidReceiptGivesBackEveryUnitOnce: a send's void receipt, settled
// void by the delivery queue after the request ended, gives back what
// every rule took (attempts, failures, a sliding window, a token bucket,
// a distinct member); a success or a second void gives nothing more.
func TestAVoidReceiptGivesBackEveryUnitOnce(t *testing.T) {
	cfg, err := config.Parse([]byte(`rules:
  - {name: per-destination, action: otp.send, key: [destination], limit: 2, window: 1h}
  - {name: sliding, action: otp.send, key: [destination], algorithm: sliding_window, limit: 3, window: 1h}
  - {name: bucket, action: otp.send, key: [global], algorithm: token_bucket, limit: 4, window: 1h}
  - {name: numbers-per-ip, action: otp.send, key: [ip], algorithm: distinct, of: destination, limit: 5, window: 1h}
  - {name: unverified, action: otp.send, key: [destination], count: failures, limit: 6, window: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), memstore.New(time.Now), guard.Options{Secret: []byte("a test secret of 32 bytes, padded"), Backstop: memstore.New(time.Now)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dest, err := identity.ParseDestination(message.Email, "ann@example.com", identity.PhonePolicy{})
	if err != nil {
		t.Fatal(err)
	}
	s := guard.Subject{Destination: dest, IP: netip.MustParseAddr("198.51.100.7")}
	left := func() map[string]int64 {
		out := map[string]int64{}
		for _, dim := range []string{"destination", "global", "ip"} {
			st, err := g.Status(ctx, dim, s)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range st {
				out[x.Rule] = x.Remaining
			}
		}
		return out
	}
	fresh := left()
	d, err := g.Allow(ctx, guard.Request{Action: "otp.send", Subject: s})
	if err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	taken := left()
	for rule, n := range fresh {
		if taken[rule] != n-1 {
			t.Fatalf("%s: %d left after the send, want %d (the check could not fail)", rule, taken[rule], n-1)
		}
	}
	receipt := g.VoidReceipt(d)
	if strings.Contains(receipt, "ann") || strings.Contains(receipt, "198.51") {
		t.Errorf("the receipt holds a clear identifier: %q", receipt)
	}
	if err := g.SettleReceipt(ctx, receipt, guard.Success); err != nil {
		t.Fatal(err)
	}
	if got := left(); !maps.Equal(got, taken) {
		t.Fatalf("a success settled the void receipt: %v", got)
	}
	for range 2 {
		if err := g.SettleReceipt(ctx, receipt, guard.Void); err != nil {
			t.Fatal(err)
		}
		if got := left(); !maps.Equal(got, fresh) {
			t.Fatalf("after the void: %v, want %v", got, fresh)
		}
	}
}

// TestAReceiptCommitsWhatASuccessProves: a login admitted through a
// trigger proves its network only when its receipt is settled as a
// success: the distinct rule of networks that count successes keeps the
// network then, and a login from a second network meets the limit of one;
// a rule counting requests, with nothing to settle, is not in the
// receipt.
func TestAReceiptCommitsWhatASuccessProves(t *testing.T) {
	g := newGuard(t, `rules:
  - {name: networks, action: login, key: [account], algorithm: distinct, of: ip/16, count: successes, limit: 1, window: 24h}
  - {name: requests, action: login, key: [account], limit: 100, window: 24h}
`, memstore.New(time.Now), guard.Options{Secret: []byte(secret), Backstop: memstore.New(time.Now)})
	ctx := context.Background()
	login := func(ip string) guard.Decision {
		d, err := g.Allow(ctx, guard.Request{Action: "login", Subject: guard.Subject{Account: "ann", IP: netip.MustParseAddr(ip)}, Partial: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := login("198.51.100.7")
	receipt := g.Receipt(d)
	if !d.Allowed || len(strings.Fields(receipt)) != 1 || !strings.HasPrefix(receipt, "networks,") {
		t.Fatalf("the first login: %+v, receipt %q (want the networks rule alone)", d, receipt)
	}
	if err := g.SettleReceipt(ctx, receipt, guard.Success); err != nil {
		t.Fatal(err)
	}
	if d := login("203.0.113.9"); d.Allowed || d.DeniedBy != "networks" {
		t.Errorf("a second network once the first is proven: %+v", d)
	}
}
