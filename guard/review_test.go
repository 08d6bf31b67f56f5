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

// TestARenewedDeviceTokenKeepsItsDeviceOnlyForItsAccount: a token renewed
// with the account's own token names the same device (a rule keyed on
// device counts both); renewed with a token of another account, or one
// of no use, it names a new device.
func TestARenewedDeviceTokenKeepsItsDeviceOnlyForItsAccount(t *testing.T) {
	g := newGuard(t, "rules:\n  - {name: r, action: login, key: [device], limit: 1, window: 1h, onStoreError: deny}\n",
		memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	token := func(account, presented string) string {
		t.Helper()
		tok, err := g.DeviceToken(account, presented, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	ann, bob := token("ann", ""), token("bob", "")
	for _, c := range []struct {
		name, tok string
		allowed   bool
	}{
		{"ann's first token", ann, true},
		{"ann's token renewed with her own", token("ann", ann), false},
		{"ann's token renewed with bob's", token("ann", bob), true},
		{"ann's token renewed with a forged one", token("ann", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), true},
	} {
		d, err := g.Allow(ctx, guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}, Device: c.tok})
		if err != nil || d.Allowed != c.allowed {
			t.Errorf("%s: allowed %v (%v), want %v", c.name, d.Allowed, err, c.allowed)
		}
	}
}

// TestEveryRequestMeetingALockoutNamesItAlike: two failures settled one
// after the other at the limit, and the requests that meet the lockout
// after them, report the same LockedUntil, in every mode (a challenge
// rule's requests are asked for a proof, not denied): the instant names
// the lockout, so its event is published once however many meet it.
func TestEveryRequestMeetingALockoutNamesItAlike(t *testing.T) {
	for _, mode := range []string{"enforce", "shadow", "challenge"} {
		t.Run(mode, func(t *testing.T) {
			g := newGuard(t, "rules:\n  - {name: locks, action: login, key: [account], count: failures, limit: 2, window: 1h, lockout: {initial: 10m, factor: 2, max: 1h}, mode: "+mode+", onStoreError: deny}\n",
				memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
			ctx := context.Background()
			req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
			a, _ := g.Allow(ctx, req)
			b, _ := g.Allow(ctx, req)
			var seen []guard.Result
			for _, d := range []guard.Decision{a, b} {
				time.Sleep(3 * time.Millisecond)
				res, err := g.Settle(ctx, req, d, guard.Failure)
				if err != nil || len(res) != 1 {
					t.Fatalf("settle: %+v %v", res, err)
				}
				seen = append(seen, res[0])
			}
			for range 2 {
				time.Sleep(3 * time.Millisecond)
				d, err := g.Allow(ctx, req)
				if err != nil || len(d.Rules) != 1 || d.Allowed != (mode != "enforce") {
					t.Fatalf("while locked: %+v %v", d, err)
				}
				seen = append(seen, d.Rules[0])
			}
			until := seen[0].LockedUntil
			if until.IsZero() {
				t.Fatalf("the lockout's start reports no end: %+v", seen[0])
			}
			for i, r := range seen {
				if !r.Locked || !r.LockedUntil.Equal(until) {
					t.Errorf("request %d: locked %v until %v, want until %v", i+1, r.Locked, r.LockedUntil, until)
				}
			}
		})
	}
}
