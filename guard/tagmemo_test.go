package guard

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/store"
)

// TestARememberedTagIsTheSubjectsOwn: the tag the memo gives an
// attacker's repeat is the one the keyed hash gives, so once the cached
// denial ends its next request is counted, and denied, under its own
// keys in the store; a neighbour whose number differs in its last digit
// gets its own tag and is allowed; allowed traffic remembers nothing;
// and the memo keeps no more tags than the deny cache's size.
func TestARememberedTagIsTheSubjectsOwn(t *testing.T) {
	now := time.Unix(1e9, 0)
	clock := func() time.Time { return now }
	c := Config{StoreTimeout: time.Second, DenyCacheTTL: time.Second, DenyCacheSize: 3, IPv6Prefix: 64, DeviceTTL: time.Hour,
		Rules: []Rule{{Name: "per-destination", Action: "a", Key: []string{"destination"}, Limit: 2, Window: time.Hour,
			Algorithm: store.FixedWindow, Count: CountRequests, Mode: ModeEnforce, OnStoreError: "deny"}}}
	g, err := New(c, memstore.New(clock), Options{Secret: []byte("0123456789abcdef"), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	from := func(to string) Subject {
		return Subject{Destination: Destination{Key: to}, IP: netip.MustParseAddr("192.0.2.1")}
	}
	allow := func(ip string) Decision {
		t.Helper()
		d, err := g.Allow(ctx, Request{Action: "a", Subject: from(ip)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	hashed := func(ip string) tagKey { // the keyed hash's tag, the memo aside
		m := g.memo
		g.memo = nil
		defer func() { g.memo = m }()
		return g.subjectTag([]string{"destination"}, from(ip))
	}
	for range 2 {
		if d := allow("+12015550101"); !d.Allowed {
			t.Fatal("the first two are denied")
		}
	}
	if n := g.memo.n.Load(); n != 0 {
		t.Fatalf("allowed traffic remembered %d tags", n)
	}
	if d := allow("+12015550101"); d.Allowed || d.Rules[0].Cached {
		t.Fatalf("the third: allowed %v, cached %v; want a denial from the store", d.Allowed, d.Rules[0].Cached)
	}
	if d := allow("+12015550101"); d.Allowed || !d.Rules[0].Cached {
		t.Fatalf("the fourth: allowed %v, cached %v; want the cached denial", d.Allowed, d.Rules[0].Cached)
	}
	if got, want := g.subjectTag([]string{"destination"}, from("+12015550101")), hashed("+12015550101"); got != want || g.memo.n.Load() != 1 {
		t.Fatalf("the memo's tag %s, the hash's %s (%d remembered)", got[:], want[:], g.memo.n.Load())
	}
	if got, want := g.subjectTag([]string{"destination"}, from("+12015550102")), hashed("+12015550102"); got != want || got == hashed("+12015550101") {
		t.Fatalf("the neighbour's tag %s, its hash's %s", got[:], want[:])
	}
	if d := allow("+12015550102"); !d.Allowed {
		t.Fatal("the neighbour is denied")
	}
	now = now.Add(2 * time.Second) // the cached denial ends; the window does not
	if d := allow("+12015550101"); d.Allowed || d.Rules[0].Cached {
		t.Fatalf("after the cached denial: allowed %v, cached %v; want a denial from the store, under its own keys", d.Allowed, d.Rules[0].Cached)
	}
	for i := range 6 {
		ip := fmt.Sprintf("+1201555020%d", i)
		for range 3 {
			allow(ip)
		}
		if n := g.memo.n.Load(); n > 3 {
			t.Fatalf("%d tags remembered; the deny cache holds 3", n)
		}
	}
}
