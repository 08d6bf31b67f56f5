package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
)

// Tests for what an outside review's injected bugs showed untested.

// TestASettleGivesBackEveryUnitOfItsTake: an attempt of n units
// (AllowN), void or a success on a failure-counting rule, gives all n
// back, not one.
func TestASettleGivesBackEveryUnitOfItsTake(t *testing.T) {
	for _, outcome := range []guard.Outcome{guard.Void, guard.Success} {
		g := newGuard(t, "rules:\n  - {name: r, action: export, key: [account], count: failures, limit: 5, window: 1h, onStoreError: deny}\n",
			memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
		ctx := context.Background()
		req := guard.Request{Action: "export", Subject: guard.Subject{Account: "ann"}}
		d, err := g.AllowN(ctx, req, 3)
		if err != nil || !d.Allowed || d.Rules[0].Remaining != 2 {
			t.Fatalf("a take of 3: %+v %v", d, err)
		}
		if _, err := g.Settle(ctx, req, d, outcome); err != nil {
			t.Fatal(err)
		}
		if d, err := g.AllowN(ctx, req, 5); err != nil || !d.Allowed {
			t.Errorf("after settling the 3 as %v, a take of the whole limit: %+v %v", outcome, d, err)
		}
	}
}

// TestADeviceTokenTrustsItsOwnAccountOnly: a valid device token issued
// for one account, presented with another, leaves the request untrusted.
func TestADeviceTokenTrustsItsOwnAccountOnly(t *testing.T) {
	g := newGuard(t, "rules:\n  - {name: r, action: login, when: {device: untrusted}, key: [account], limit: 100, window: 1h, onStoreError: deny}\n",
		memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	tok, err := g.DeviceToken("ann", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for account, want := range map[string]string{"ann": guard.DeviceTrusted, "bob": guard.DeviceUntrusted} {
		d, err := g.Allow(ctx, guard.Request{Action: "login", Subject: guard.Subject{Account: account}, Device: tok})
		if err != nil || d.Device != want {
			t.Errorf("ann's token presented for %s: device %q (%v), want %q", account, d.Device, err, want)
		}
	}
}
