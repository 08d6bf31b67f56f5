package redisstore_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/store"
)

// docs/contract.md §7 on every backend (a single Redis, a three-master
// cluster where a subject's keys and its device state sit in different
// slots, and the Serverless double): network keys, failure ratios,
// trusted devices and budgets that follow verified traffic.

func loginAt(account, ip string) guard.Request {
	return guard.Request{Action: "login", Subject: guard.Subject{Account: account, IP: netip.MustParseAddr(ip)}}
}

// Addresses in one /24 share an ip/24 counter, another /24 does not; an
// IPv6 client counts by its /48.
func TestNetworksShareTheirCounter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), `
  - {name: per-24, action: login, key: [ip/24], limit: 3, window: 1h}
  - {name: per-16, action: login, key: [ip/16], limit: 5, window: 1h}
`)
		for i, ip := range []string{"198.51.100.1", "198.51.100.77", "198.51.100.254"} {
			if d := allow(t, g, loginAt("a", ip)); !d.Allowed {
				t.Fatalf("request %d from %s: %+v", i, ip, d)
			}
		}
		if d := allow(t, g, loginAt("a", "198.51.100.9")); d.Allowed || d.DeniedBy != "per-24" {
			t.Fatalf("a fourth address of the /24: %+v, want a denial by per-24", d)
		}
		if d := allow(t, g, loginAt("a", "198.51.101.9")); !d.Allowed {
			t.Fatalf("another /24 of the /16: %+v", d)
		}
		if d := allow(t, g, loginAt("a", "198.51.102.9")); !d.Allowed {
			t.Fatalf("a third /24: %+v", d)
		}
		// the /16 has seen 5 now (the denied request took nothing)
		if d := allow(t, g, loginAt("a", "198.51.103.9")); d.Allowed || d.DeniedBy != "per-16" {
			t.Fatalf("a sixth address of the /16: %+v, want a denial by per-16", d)
		}
		if d := allow(t, g, loginAt("a", "198.52.0.1")); !d.Allowed {
			t.Fatalf("another /16: %+v", d)
		}
		for i, ip := range []string{"2001:db8:1:1::1", "2001:db8:1:ffff::2", "2001:db8:1:2:3::4"} {
			if d := allow(t, g, loginAt("a", ip)); !d.Allowed {
				t.Fatalf("IPv6 request %d: %+v", i, d)
			}
		}
		if d := allow(t, g, loginAt("a", "2001:db8:1:abcd::1")); d.Allowed || d.DeniedBy != "per-24" {
			t.Fatalf("a fourth address of the IPv6 /48: %+v", d)
		}
	})
}

// ratioRule denies a network once 20 attempts were seen while 80% or more
// of them failed.
const ratioRule = `  - {name: ratio, action: login, key: [ip/24], algorithm: ratio, limit: 80%, min: 20, window: 1h}
`

// play sends n login attempts from network net (a /24), one in every
// `every` succeeding, the others failing, and returns how many the guard
// denied.
func play(t *testing.T, g *guard.Guard, net string, n, every int) int {
	t.Helper()
	denied := 0
	for i := range n {
		r := loginAt(fmt.Sprintf("acct-%d", i), fmt.Sprintf("%s.%d", net, 1+i%250))
		d := allow(t, g, r)
		if !d.Allowed {
			denied++
			continue
		}
		o := guard.Failure
		if i%every == 0 {
			o = guard.Success
		}
		if _, err := g.Settle(context.Background(), r, d, o); err != nil {
			t.Fatal(err)
		}
	}
	return denied
}

// The ratio tells a stuffing network (90% failures) from a network full
// of real users (10%), at any volume: the first is denied once it has
// shown min attempts, the second never.
func TestTheRatioDeniesAStuffingNetworkNotAnISP(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), ratioRule)
		for _, n := range []int{30, 300, 3000} {
			net := fmt.Sprintf("203.0.%d", n%250)
			if denied := play(t, g, net, n, 10); denied == 0 || denied < n-25 {
				t.Errorf("%d attempts, 90%% failing: %d denied, want all but about the first 20", n, denied)
			}
			isp := fmt.Sprintf("198.18.%d", n%250)
			// one in ten fails: nine in ten succeed
			denied := 0
			for i := range n {
				r := loginAt(fmt.Sprintf("user-%d", i), fmt.Sprintf("%s.%d", isp, 1+i%250))
				d := allow(t, g, r)
				if !d.Allowed {
					denied++
					continue
				}
				o := guard.Success
				if i%10 == 0 {
					o = guard.Failure
				}
				if _, err := g.Settle(context.Background(), r, d, o); err != nil {
					t.Fatal(err)
				}
			}
			if denied != 0 {
				t.Errorf("%d attempts, 10%% failing: %d denied, want none", n, denied)
			}
		}
	})
}

// An elastic budget grows with the verified sends on its key (a receipt
// settled as a success) and not with the unverified ones.
func TestAnElasticBudgetFollowsVerifiedSends(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), `
  - {name: unverified-per-country, action: otp.send, key: [country], algorithm: sliding_window, count: failures,
     limit: 5, window: 1h, elastic: {ratio: 20%}}
`)
		send := func(country string, i int) guard.Request {
			return guard.Request{Action: "otp.send", Subject: guard.Subject{Destination: guard.Destination{
				Channel: message.SMS, Key: fmt.Sprintf("+%s%d", country, i), Country: country}}}
		}
		// Nobody enters a code in LV: 5 sends, then nothing.
		admitted := 0
		for i := range 50 {
			if d := allow(t, g, send("LV", i)); d.Allowed {
				admitted++
			}
		}
		if admitted != 5 {
			t.Fatalf("unverified sends: %d admitted, want the limit, 5", admitted)
		}
		// In FR, 100 users verify their codes: the budget of sends still
		// unverified grows to 20% of them.
		for i := range 100 {
			d := allow(t, g, send("FR", i))
			if !d.Allowed {
				t.Fatalf("verified send %d denied: %+v", i, d)
			}
			if err := g.SettleReceipt(context.Background(), g.Receipt(d), guard.Success); err != nil {
				t.Fatal(err)
			}
		}
		admitted = 0
		for i := range 50 {
			if d := allow(t, g, send("FR", 1000+i)); d.Allowed {
				admitted++
			}
		}
		if admitted != 20 {
			t.Fatalf("after 100 verified sends: %d unverified admitted, want 20%% of 100", admitted)
		}
		// A void send (the provider failed) verifies nothing.
		for i := range 50 {
			d := allow(t, g, send("EE", i))
			if !d.Allowed {
				t.Fatalf("void send %d denied: %+v", i, d)
			}
			if err := g.SettleReceipt(context.Background(), g.Receipt(d), guard.Void); err != nil {
				t.Fatal(err)
			}
		}
		admitted = 0
		for i := range 50 {
			if d := allow(t, g, send("EE", 1000+i)); d.Allowed {
				admitted++
			}
		}
		if admitted != 5 {
			t.Fatalf("after 50 void sends: %d admitted, want 5", admitted)
		}
	})
}

// deviceRules: a tight per-account rule for untrusted clients, a loose
// one for every client, and one keyed on the device.
const deviceRules = `
  - {name: untrusted-per-account, action: login, key: [account], count: failures, limit: 2, window: 1h,
     when: {device: untrusted}}
  - {name: per-account, action: login, key: [account], count: failures, limit: 6, window: 1h}
  - {name: per-device, action: login, key: [account, device], limit: 100, window: 1h}
`

// A device token exempts its holder from the rules filtered untrusted
// and not from the others; it is refused (untrusted) for another account,
// after revocation and when forged.
func TestADeviceTokenExemptsItsHolderOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		g := newGuard(t, newStore(rdb), deviceRules)
		victim := loginAt("victim", "192.0.2.1")
		d := allow(t, g, victim)
		if d.Device != guard.DeviceUntrusted {
			t.Fatalf("no token: device %q", d.Device)
		}
		g.Settle(ctx, victim, d, guard.Success)
		tok, err := g.DeviceToken("victim", "", d.At)
		if err != nil {
			t.Fatal(err)
		}
		// A stranger fails twice: the untrusted budget of the account is
		// spent, for every untrusted client.
		stranger := loginAt("victim", "203.0.113.66")
		for range 2 {
			d := allow(t, g, stranger)
			g.Settle(ctx, stranger, d, guard.Failure)
		}
		if d := allow(t, g, stranger); d.Allowed || d.DeniedBy != "untrusted-per-account" {
			t.Fatalf("the stranger's third try: %+v", d)
		}
		// The owner's device is trusted: the untrusted rule does not apply
		// to it, and is not in its decision.
		owner := victim
		owner.Device = tok
		d = allow(t, g, owner)
		if !d.Allowed || d.Device != guard.DeviceTrusted {
			t.Fatalf("the owner's device: %+v", d)
		}
		for _, r := range d.Rules {
			if r.Rule == "untrusted-per-account" {
				t.Fatalf("a rule for untrusted devices decided for a trusted one: %+v", d.Rules)
			}
		}
		g.Settle(ctx, owner, d, guard.Failure) // a typo
		// ... but the rules for every client still count it: 6 failures.
		for range 3 {
			d := allow(t, g, owner)
			g.Settle(ctx, owner, d, guard.Failure)
		}
		if d := allow(t, g, owner); d.Allowed || d.DeniedBy != "per-account" {
			t.Fatalf("a trusted device past per-account: %+v, want a denial by per-account", d)
		}
		if _, err := g.Unblock(ctx, "account", owner.Subject); err != nil {
			t.Fatal(err)
		}
		// Another account's token, a forged one, a revoked one: untrusted.
		other, _ := g.DeviceToken("someone-else", "", d.At)
		forged := []byte(tok)
		forged[10] ^= 1
		for name, bad := range map[string]string{"another account's": other, "a forged": string(forged), "a truncated": tok[:20]} {
			r := stranger
			r.Device = bad
			for range 2 {
				d := allow(t, g, r)
				g.Settle(ctx, r, d, guard.Failure)
			}
			if d := allow(t, g, r); d.Allowed || d.Device != guard.DeviceUntrusted {
				t.Errorf("%s token: %+v, want an untrusted device denied by untrusted-per-account", name, d)
			}
			if _, err := g.Unblock(ctx, "account", r.Subject); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.RevokeDevices(ctx, "Victim"); err != nil { // any case: the same account
			t.Fatal(err)
		}
		for range 2 {
			d := allow(t, g, owner)
			g.Settle(ctx, owner, d, guard.Failure)
		}
		d = allow(t, g, owner)
		if d.Allowed || d.Device != guard.DeviceUntrusted || d.DeniedBy != "untrusted-per-account" {
			t.Fatalf("a revoked token: %+v", d)
		}
		// A login after the revocation earns a token that is trusted:
		// issued at the store's time of a decision after it, as a login
		// issues it (this guard has no StoreClock: the process's own clock
		// is not the store's, and with the Serverless double the time the
		// revocation was passed may be ahead of it by half a round trip)
		fresh, _ := g.DeviceToken("victim", tok, d.At)
		owner.Device = fresh
		if d := allow(t, g, owner); !d.Allowed || d.Device != guard.DeviceTrusted {
			t.Fatalf("a token issued after the revocation: %+v", d)
		}
	})
}

// A rule keyed on the device counts each trusted device apart; the
// untrusted clients of an account share one bucket.
func TestARuleKeyedOnTheDevice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), `  - {name: per-device, action: login, key: [device], limit: 2, window: 1h}
`)
		r := loginAt("bob", "192.0.2.5")
		for range 2 {
			allow(t, g, r)
		}
		if d := allow(t, g, r); d.Allowed {
			t.Fatalf("a third untrusted try: %+v", d)
		}
		for i := range 2 {
			tok, _ := g.DeviceToken("bob", "", time.Now())
			dev := r
			dev.Device = tok
			for k := range 2 {
				if d := allow(t, g, dev); !d.Allowed || d.Device != guard.DeviceTrusted {
					t.Fatalf("device %d, try %d: %+v", i, k, d)
				}
			}
			if d := allow(t, g, dev); d.Allowed {
				t.Fatalf("device %d's third try: %+v", i, d)
			}
		}
		// other accounts' untrusted clients have their own bucket
		if d := allow(t, g, loginAt("carol", "192.0.2.5")); !d.Allowed {
			t.Fatalf("another account: %+v", d)
		}
	})
}

func init() {
	properties = append(properties,
		struct {
			name string
			test func(t *testing.T, e env)
		}{"a ratio's retry-after admits", func(t *testing.T, e env) {
			g := e.guard(t, "  - {name: r, action: login, key: [ip/24], algorithm: ratio, limit: 50%, min: 4, window: 10m}\n")
			r := loginReq("x", "198.51.100.1")
			steps := 0
			for k := range 200 {
				d := allow(t, g, r)
				if d.Allowed {
					o := guard.Failure
					if k%5 == 0 {
						o = guard.Success
					}
					g.Settle(context.Background(), r, d, o)
					e.advance(7 * time.Second)
					continue
				}
				if d.RetryAfter <= 0 || d.RetryAfter > 20*time.Minute {
					t.Fatalf("step %d: retry after %s", k, d.RetryAfter)
				}
				if d.RetryAfter > time.Millisecond {
					e.advance(d.RetryAfter - time.Millisecond)
					if d2 := allow(t, g, r); d2.Allowed {
						t.Fatalf("step %d: admitted before the retry-after (%s)", k, d.RetryAfter)
					}
				}
				e.advance(time.Millisecond)
				if d2 := allow(t, g, r); !d2.Allowed {
					t.Fatalf("step %d: denied at the retry-after (%s): %+v", k, d.RetryAfter, d2)
				} else {
					g.Settle(context.Background(), r, d2, guard.Failure)
				}
				steps++
			}
			if steps < 5 {
				t.Fatalf("only %d denials checked", steps)
			}
		}},
		struct {
			name string
			test func(t *testing.T, e env)
		}{"a success counts in a ratio, a void attempt does not", func(t *testing.T, e env) {
			g := e.guard(t, "  - {name: r, action: login, key: [ip], algorithm: ratio, limit: 50%, min: 4, window: 1h}\n")
			r := loginReq("x", "198.51.100.1")
			// 4 attempts: 2 fail, 2 succeed: 50%, at the limit: denied
			for k := range 4 {
				d := allow(t, g, r)
				o := guard.Failure
				if k%2 == 1 {
					o = guard.Success
				}
				g.Settle(context.Background(), r, d, o)
			}
			if d := allow(t, g, r); d.Allowed {
				t.Fatalf("2 failures of 4 at 50%%: %+v", d)
			}
			g2 := e.guard(t, "  - {name: r, action: login, key: [ip], algorithm: ratio, limit: 50%, min: 4, window: 1h}\n")
			r2 := loginReq("x", "198.51.100.2")
			// void attempts are not attempts: 10 of them, then 3 failures
			for range 10 {
				d := allow(t, g2, r2)
				g2.Settle(context.Background(), r2, d, guard.Void)
			}
			for range 3 {
				d := allow(t, g2, r2)
				if !d.Allowed {
					t.Fatalf("void attempts counted: %+v", d)
				}
				g2.Settle(context.Background(), r2, d, guard.Failure)
			}
		}},
		struct {
			name string
			test func(t *testing.T, e env)
		}{"a device token expires", func(t *testing.T, e env) {
			g := e.guard(t, "  - {name: u, action: login, key: [account], limit: 1, window: 1h, when: {device: untrusted}}\n")
			r := loginReq("x", "198.51.100.1")
			allow(t, g, r)
			tok, _ := g.DeviceToken("x", "", e.now())
			r.Device = tok
			e.advance(4320*time.Hour - time.Second)
			if d := allow(t, g, r); !d.Allowed || d.Device != guard.DeviceTrusted {
				t.Fatalf("a second before it expires: %+v", d)
			}
			e.advance(time.Second)
			if d := allow(t, g, r); d.Device != guard.DeviceUntrusted {
				t.Fatalf("at its expiry: %+v", d)
			}
		}},
	)
}

// The backstop keeps devices apart too: with the store failing, a
// revocation this process made still holds.
func TestTheBackstopKnowsThisProcessRevocations(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	back := memstore.New(func() time.Time { return now })
	cfg := parseConfig(t, "store: {timeout: 100ms}\nrules:\n  - {name: u, action: login, key: [account], limit: 1, window: 1h, when: {device: untrusted}, onStoreError: allow}\n")
	g, err := guard.New(cfg.Engine(), failing{}, guard.Options{Secret: secret, Backstop: back})
	if err != nil {
		t.Fatal(err)
	}
	r := loginReq("x", "198.51.100.1")
	r.Device, _ = g.DeviceToken("x", "", now.Add(-time.Minute))
	for range 3 {
		if d := allow2(g, r); !d.Allowed || d.Device != guard.DeviceTrusted {
			t.Fatalf("the backstop, a trusted device: %+v", d)
		}
	}
	_ = g.RevokeDevices(context.Background(), "x") // the store fails; the backstop learns it
	allow2(g, r)
	if d := allow2(g, r); d.Allowed || d.Device != guard.DeviceUntrusted {
		t.Fatalf("the backstop after a revocation: %+v", d)
	}
}

type failing struct{}

func (failing) Do(context.Context, []store.Op) ([]store.OpResult, error) {
	return nil, fmt.Errorf("%w: down", store.ErrStoreUnavailable)
}

func allow2(g *guard.Guard, r guard.Request) guard.Decision {
	d, _ := g.Allow(context.Background(), r)
	return d
}
