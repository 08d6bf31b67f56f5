//go:build !race

// The race detector changes what escapes and what sync.Pool keeps, so
// allocation counts mean something only without it: make test runs the
// product with -race, which leaves this file out, then this package again
// without it (its step "allocs").

package guard_test

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/memstore"
)

// TestAnAttackersRepeatAllocatesAlike: a denial answered from the deny
// cache costs as many allocations with eight rules as with one (the
// rules' tags stay on the stack up to eight).
func TestAnAttackersRepeatAllocatesAlike(t *testing.T) {
	allocs := func(n int) float64 {
		var b strings.Builder
		b.WriteString("rules:\n")
		for i := range n {
			b.WriteString("  - {name: r" + strconv.Itoa(i) + ", action: login, key: [account], limit: 1, window: 1h, onStoreError: deny}\n")
		}
		g := newGuard(t, b.String(), memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
		ctx := context.Background()
		req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
		g.Allow(ctx, req)
		if d, _ := g.Allow(ctx, req); d.Allowed {
			t.Fatal("the second is allowed")
		}
		// the least of a few measures: under -race, sync.Pool drops
		// what is put back at random, and the keyed hash's state is
		// then made anew (noise; the eighth rule's tags would be every time)
		least := 1e9
		for range 5 {
			least = min(least, testing.AllocsPerRun(50, func() {
				if d, _ := g.Allow(ctx, req); !d.Rules[0].Cached {
					t.Fatal("not answered from the cache")
				}
			}))
		}
		return least
	}
	if one, eight := allocs(1), allocs(8); eight > one {
		t.Errorf("a cached denial: %v allocations with one rule, %v with eight", one, eight)
	}
}

// TestAnAttackersRepeatAllocatesNothing: a denial answered from the deny
// cache allocates nothing, its rule keyed on a network (formatted into
// the keyed hash's buffer) or on an address, IPv4 or IPv6, or a distinct
// rule's new value, among other rules: neither its tag nor its decision's
// Rules (shared, see Decision.Rules) are built anew. The process's clock
// stands still, so the shared Rules never age out here.
func TestAnAttackersRepeatAllocatesNothing(t *testing.T) {
	now := time.Unix(1e9, 0)
	dest := func(a string) guard.Destination {
		d, err := identity.ParseEmail(a)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, ip := range []string{"192.0.2.7", "2001:db8::7", "::ffff:192.0.2.7"} {
		for _, rule := range []string{"key: [ip/24]", "key: [ip]", "key: [destination]",
			"key: [destination], of: ip/24, algorithm: distinct", "key: [ip], of: destination, algorithm: distinct"} {
			g := newGuard(t, "rules:\n  - {name: deny, action: send, "+rule+", limit: 1, window: 1h, onStoreError: deny}\n"+
				"  - {name: other, action: send, key: [destination, ip/16], limit: 100, window: 1h, onStoreError: deny}\n"+
				"  - {name: all, action: send, key: [global], limit: 100, window: 1h, onStoreError: deny}\n",
				memstore.New(func() time.Time { return now }), guard.Options{Secret: []byte(secret), Clock: func() time.Time { return now }})
			ctx := context.Background()
			req := guard.Request{Action: "send", Subject: guard.Subject{Destination: dest("ann@example.com"), IP: netip.MustParseAddr(ip)}}
			// the first takes the limit: for a distinct rule, another value
			first := req
			switch {
			case strings.Contains(rule, "of: ip/24"):
				first.Subject.IP = netip.MustParseAddr("198.51.100.1")
			case strings.Contains(rule, "of: destination"):
				first.Subject.Destination = dest("bob@example.com")
			}
			if d, _ := g.Allow(ctx, first); !d.Allowed {
				t.Fatalf("%s: the first is denied", rule)
			}
			if d, _ := g.Allow(ctx, req); d.Allowed || d.DeniedBy != "deny" {
				t.Fatalf("%s: the second is not denied by the rule: %+v", rule, d)
			}
			least := 1e9
			for range 5 {
				least = min(least, testing.AllocsPerRun(50, func() {
					if d, _ := g.Allow(ctx, req); !d.Rules[0].Cached || d.Allowed {
						t.Fatal("not answered from the cache")
					}
				}))
			}
			if least != 0 {
				t.Errorf("%s, %s: a cached denial allocates %v times", ip, rule, least)
			}
		}
	}
}

// TestAnAttackersRepeatUnderTheDefaultRulesAllocatesNothing: the same
// under the default config's rules, as the API asks them (a send by
// email, whose sms rules the channel's filter leaves out, and a send by
// sms, nine rules): the list a filter leaves is kept, as the action's own
// is, and the tags of up to 16 rules stay on the stack.
func TestAnAttackersRepeatUnderTheDefaultRulesAllocatesNothing(t *testing.T) {
	now := time.Unix(1e9, 0)
	clock := func() time.Time { return now }
	email, err := identity.ParseEmail("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	phone, err := identity.ParsePhone("+12015550123", identity.PhonePolicy{AllowedTypes: []string{"fixed_line_or_mobile"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, dest := range []guard.Destination{email, phone} {
		g, err := guard.New(config.Default().Engine(), memstore.New(clock), guard.Options{Secret: []byte(secret), Clock: clock, Backstop: memstore.New(clock)})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		req := guard.Request{Action: "otp.send", Subject: guard.Subject{Destination: dest, IP: netip.MustParseAddr("192.0.2.7")},
			Attributes: map[string]string{"channel": string(dest.Channel), "purpose": "login"}}
		var d guard.Decision
		for range 20 {
			if d, err = g.Allow(ctx, req); err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
		}
		if d.Allowed {
			t.Fatalf("%s: 20 sends allowed", dest.Channel)
		}
		least := 1e9
		for range 5 {
			least = min(least, testing.AllocsPerRun(50, func() {
				if d, _ := g.Allow(ctx, req); d.Allowed || d.RetryAfter <= 0 || !slices.ContainsFunc(d.Rules, func(r guard.Result) bool { return r.Cached }) {
					t.Fatalf("%s: not answered from the cache: %+v", dest.Channel, d)
				}
			}))
		}
		if least != 0 {
			t.Errorf("%s: a cached denial under the default rules allocates %v times", dest.Channel, least)
		}
	}
}

// TestTheRepeatsOfManyAttackersShareTheirRules: the shared Rules of
// cached denials are kept in a bounded number of slots, two for each
// entry, so a thousand subjects repeating at once mostly keep theirs: a
// round of their repeats allocates for at most one in twenty of them
// (in one slot each, 44% did).
func TestTheRepeatsOfManyAttackersShareTheirRules(t *testing.T) {
	now := time.Unix(1e9, 0)
	clock := func() time.Time { return now }
	g := newGuard(t, "store: {denyCache: {ttl: 1m, size: 5000}}\nrules:\n  - {name: r, action: login, key: [account], limit: 1, window: 1h, onStoreError: deny}\n",
		memstore.New(clock), guard.Options{Secret: []byte(secret), Clock: clock})
	ctx := context.Background()
	const n = 1000
	reqs := make([]guard.Request, n)
	for i := range reqs {
		reqs[i] = guard.Request{Action: "login", Subject: guard.Subject{Account: "user" + strconv.Itoa(i)}}
		g.Allow(ctx, reqs[i])
		if d, _ := g.Allow(ctx, reqs[i]); d.Allowed {
			t.Fatal("the second is allowed")
		}
	}
	round := func() {
		for i := range reqs {
			if d, _ := g.Allow(ctx, reqs[i]); !d.Rules[0].Cached {
				t.Fatal("not answered from the cache")
			}
		}
	}
	for range 5 {
		round()
	}
	if a := testing.AllocsPerRun(10, round); a > n/20 {
		t.Errorf("a round of %d cached denials allocates %v times", n, a)
	}
}
