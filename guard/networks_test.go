package guard_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
)

// TestEachNetworkDimensionCountsItsOwnNetwork: every network dimension
// counts its own prefix, on IPv4 and on IPv6: ip is an IPv6 /64 (an IPv4
// /32), ip/56 and ip/48 as named, ip/24 an IPv6 /48, ip/16 an IPv6 /32.
// Each case is a rule
// alone with a limit of 2: two addresses of one network use it up, an
// address one bit outside does not. (The reviewed TestIPv6NetworksAreCountedToo
// passed with ip/56 counting /64s and ip/16 /48s: its denials all came
// from another rule.)
func TestEachNetworkDimensionCountsItsOwnNetwork(t *testing.T) {
	cases := []struct {
		dim           string
		a, b, outside string // a and b share the network; outside does not
	}{
		{"ip", "2001:db8:0:1:aaaa::1", "2001:db8:0:1:bbbb::2", "2001:db8:0:2::1"},
		{"ip", "192.0.2.1", "::ffff:192.0.2.1", "192.0.2.2"},
		{"ip/56", "2001:db8:0:100::1", "2001:db8:0:1ff::1", "2001:db8:0:200::1"},
		{"ip/48", "2001:db8:7:0::1", "2001:db8:7:ffff::1", "2001:db8:8::1"},
		{"ip/24", "198.51.100.1", "198.51.100.254", "198.51.101.1"},
		{"ip/24", "2001:db8:7:1::1", "2001:db8:7:ffff::1", "2001:db8:8::1"},
		{"ip/16", "198.51.0.1", "198.51.255.254", "198.52.0.1"},
		{"ip/16", "2001:db8:1::1", "2001:db8:ffff::1", "2001:db9::1"},
	}
	for _, c := range cases {
		t.Run(c.dim+" "+c.a, func(t *testing.T) {
			cfg, err := config.Parse([]byte(fmt.Sprintf("store: {denyCache: {ttl: 0s}}\nrules:\n  - {name: n, action: otp.send, key: [%s], limit: 2, window: 1h}\n", c.dim)))
			if err != nil {
				t.Fatal(err)
			}
			g, err := guard.New(cfg.Engine(), memstore.New(nil), guard.Options{Secret: []byte("test-secret-0123456789")})
			if err != nil {
				t.Fatal(err)
			}
			try := func(ip string) bool {
				d, err := g.Allow(context.Background(), guard.Request{Action: "otp.send", Subject: guard.Subject{Account: "x", IP: netip.MustParseAddr(ip)}})
				if err != nil {
					t.Fatal(err)
				}
				return d.Allowed
			}
			if !try(c.a) || !try(c.b) {
				t.Fatal("the limit's two attempts denied")
			}
			if try(c.a) || try(c.b) {
				t.Fatalf("%s and %s are not counted as one %s network", c.a, c.b, c.dim)
			}
			if !try(c.outside) {
				t.Fatalf("%s is counted with %s on %s", c.outside, c.a, c.dim)
			}
		})
	}
}

// TestOnlyTheSlash56RuleStopsAnIPv6Rotation: with a config of the /56
// rule alone, a client rotating through the /64s of its /56 is held to
// that rule's limit; its neighbour /56 keeps its own budget.
func TestOnlyTheSlash56RuleStopsAnIPv6Rotation(t *testing.T) {
	cfg, err := config.Parse([]byte("store: {denyCache: {ttl: 0s}}\nrules:\n  - {name: failed-accounts-per-ip56, action: login, key: [ip/56], algorithm: distinct, of: account, count: failures, limit: 5, window: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), memstore.New(nil), guard.Options{Secret: []byte("test-secret-0123456789"), Backstop: memstore.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fail := func(ip string, i int) bool {
		r := guard.Request{Action: "login", Subject: guard.Subject{Account: fmt.Sprintf("acct%d", i), IP: netip.MustParseAddr(ip)}}
		d, err := g.Allow(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			if _, err := g.Settle(ctx, r, d, guard.Failure); err != nil {
				t.Fatal(err)
			}
		}
		return d.Allowed
	}
	admitted := 0
	for i := range 40 {
		if fail(fmt.Sprintf("2001:db8:1:%x::%x", i%20, i+1), i) { // twenty /64s of one /56
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("%d failed logins on distinct accounts from one /56, want the rule's 5", admitted)
	}
	if !fail("2001:db8:1:100::1", 100) {
		t.Fatal("the next /56 was denied")
	}
}
