package guard_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/pacer"
	"github.com/otpguard/otpguard/guard/store"
)

// TestParseASN: 13335, AS13335 and as13335 are one number; nothing else
// (zero, over 32 bits, a bare AS) is.
func TestParseASN(t *testing.T) {
	for in, want := range map[string]uint32{"13335": 13335, "AS13335": 13335, "as7": 7, " AS64500 ": 64500, "4294967295": 4294967295} {
		if got, err := identity.ParseASN(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "AS", "A", "0", "AS0", "4294967296", "AS-1", "ASN13335", "13335AS"} {
		if got, err := identity.ParseASN(in); !errors.Is(err, guard.ErrInvalidInput) {
			t.Errorf("%q: %d %v, want invalid input", in, got, err)
		}
	}
}

// TestParseDimension: each dimension reads its own kind of value; a
// prefix is + and 1 to 15 digits.
func TestParseDimension(t *testing.T) {
	cfg := config.Default()
	p := cfg.OTP.SMS.Policy()
	for _, c := range []struct {
		dim, value string
		check      func(guard.Subject) bool
	}{
		{"prefix", "+1", func(s guard.Subject) bool { return s.Destination.Prefix == "+1" }},
		{"prefix", " +123456789012345 ", func(s guard.Subject) bool { return s.Destination.Prefix == "+123456789012345" }},
		{"asn", "AS64500", func(s guard.Subject) bool { return s.ASN == 64500 }},
		{"country", " gb", func(s guard.Subject) bool { return s.Destination.Country == "GB" }},
		{"ip/16", "203.0.113.9", func(s guard.Subject) bool { return s.IP == netip.MustParseAddr("203.0.113.9") }},
		{"account", "Ann", func(s guard.Subject) bool { return s.Account == "ann" }},
		{"destination", "ann@example.com", func(s guard.Subject) bool { return s.Destination.Key == "ann@example.com" }},
		{"global", "anything", func(s guard.Subject) bool { return s.Account == "" && s.Destination.IsZero() }},
	} {
		s, err := identity.ParseDimension(c.dim, c.value, p)
		if err != nil || !c.check(s) {
			t.Errorf("%s %q: %+v %v", c.dim, c.value, s, err)
		}
	}
	for _, c := range [][2]string{
		{"prefix", "+"}, {"prefix", "+1234567890123456"}, {"prefix", "1415"}, {"prefix", "+14a5"}, {"prefix", "++1"},
		{"asn", "x"}, {"country", "XX"}, {"device", "abc"}, {"nothing", "x"}, {"ip", "300.0.0.1"},
	} {
		if _, err := identity.ParseDimension(c[0], c[1], p); !errors.Is(err, guard.ErrInvalidInput) {
			t.Errorf("%s %q: %v, want invalid input", c[0], c[1], err)
		}
	}
	if d, err := identity.ParseEmail("a@example.com"); err != nil || d.IsZero() {
		t.Errorf("a parsed address is not zero: %+v %v", d, err)
	}
}

// networks maps addresses to AS numbers.
type networks map[netip.Addr]uint32

func (n networks) ASN(a netip.Addr) (uint32, bool) { v, ok := n[a]; return v, ok }

// TestAnASNIsItsNetworkWhereverItIsNamed: a request counted on its
// address's AS (through the database) is the same subject as that AS
// named by number (an administrator's status read); an address the
// database does not know counts as its /16.
func TestAnASNIsItsNetworkWhereverItIsNamed(t *testing.T) {
	known := netip.MustParseAddr("203.0.113.9")
	g := newGuard(t, "network: {asnDatabase: x.mmdb}\nrules:\n  - {name: per-asn, action: login, key: [asn], limit: 5, window: 1h, onStoreError: deny}\n",
		memstore.New(time.Now), guard.Options{Secret: []byte(secret), Networks: networks{known: 64500}})
	ctx := context.Background()
	remaining := func(s guard.Subject) int64 {
		t.Helper()
		st, err := g.Status(ctx, "asn", s)
		if err != nil || len(st) != 1 {
			t.Fatalf("status %+v: %+v %v", s, st, err)
		}
		return st[0].Remaining
	}
	for range 2 {
		if d, err := g.Allow(ctx, guard.Request{Action: "login", Subject: guard.Subject{Account: "ann", IP: known}}); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	if r := remaining(guard.Subject{ASN: 64500}); r != 3 {
		t.Errorf("AS64500 by number: %d left, want 3", r)
	}
	if r := remaining(guard.Subject{ASN: 64501}); r != 5 {
		t.Errorf("another AS: %d left", r)
	}
	unknown := netip.MustParseAddr("198.51.100.7")
	g.Allow(ctx, guard.Request{Action: "login", Subject: guard.Subject{Account: "ann", IP: unknown}})
	if r := remaining(guard.Subject{IP: netip.MustParseAddr("198.51.7.7")}); r != 4 {
		t.Errorf("an unknown address counts as its /16: %d left", r)
	}
}

// TestADecisionMeetsTheRulesOfItsActionAndDevice: a decision applies the
// rules of its action whose attributes it matches: an untrusted device's
// (none, or a token of no use) or a trusted one's; Actions lists the
// actions.
func TestADecisionMeetsTheRulesOfItsActionAndDevice(t *testing.T) {
	g := newGuard(t, `rules:
  - {name: any, action: login, key: [account], limit: 5, window: 1h, onStoreError: deny}
  - {name: strangers, action: login, key: [account], limit: 5, window: 1h, when: {device: untrusted}, onStoreError: deny}
  - {name: known, action: login, key: [account], limit: 5, window: 1h, when: {device: trusted}, onStoreError: deny}
  - {name: sends, action: otp.send, key: [destination], limit: 5, window: 1h}
`, memstore.New(time.Now), guard.Options{Secret: []byte("a test secret of 32 bytes, padded")})
	ctx := context.Background()
	tok, err := g.DeviceToken("ann", "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		device string
		want   []string
	}{{"", []string{"any", "strangers"}}, {"a token", []string{"any", "strangers"}}, {tok, []string{"any", "known"}}} {
		d, err := g.Allow(ctx, guard.Request{Action: "login", Device: c.device, Subject: guard.Subject{Account: "ann"}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range d.Rules {
			got = append(got, r.Rule)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("device %q: rules %v, want %v", c.device, got, c.want)
		}
	}
	if !slices.Equal(g.Actions(), []string{"login", "otp.send"}) {
		t.Errorf("actions %v", g.Actions())
	}
}

// switchable is a store that counts its calls and fails while down.
type switchable struct {
	store.Store
	calls atomic.Int64
	down  atomic.Bool
}

func (s *switchable) Do(ctx context.Context, ops []store.Op) ([]store.OpResult, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return nil, store.ErrStoreUnavailable
	}
	return s.Store.Do(ctx, ops)
}

const secret = "a test secret of 32 bytes, padded"

// newGuard is a guard on store with the rules of doc; it fails the test
// when either is refused.
func newGuard(t *testing.T, doc string, st store.Store, opts guard.Options) *guard.Guard {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestTheDenyCacheKeepsItsSize: a full cache makes room for a new denial
// by dropping an older one: of three subjects denied for an hour through
// a cache of two, the last is answered from the cache, and the first two
// are not both.
func TestTheDenyCacheKeepsItsSize(t *testing.T) {
	st := &switchable{Store: memstore.New(time.Now)}
	g := newGuard(t, "store: {denyCache: {ttl: 1m, size: 2}}\nrules:\n  - {name: r, action: login, key: [account], limit: 1, window: 1h, onStoreError: deny}\n", st, guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	allow := func(account string) guard.Decision {
		d, err := g.Allow(ctx, guard.Request{Action: "login", Subject: guard.Subject{Account: account}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, a := range []string{"a", "b", "c"} {
		allow(a)
		if d := allow(a); d.Allowed {
			t.Fatalf("%s: the second is denied", a)
		}
	}
	before := st.calls.Load()
	if d := allow("c"); d.Allowed || !d.Rules[0].Cached || st.calls.Load() != before {
		t.Fatalf("the newest denial is remembered: %+v", d)
	}
	for _, a := range []string{"a", "b"} {
		if d := allow(a); d.Allowed {
			t.Fatalf("%s allowed", a)
		}
	}
	if st.calls.Load() == before {
		t.Errorf("three denials answered from a cache of two")
	}
}

// TestAVoidLeasedAttemptGoesBackToTheLease: units a lease paid for an
// attempt that did not happen (void) go back to the lease; after the
// lease is forgotten (an unblock), a void gives nothing and breaks
// nothing.
func TestAVoidLeasedAttemptGoesBackToTheLease(t *testing.T) {
	st := &switchable{Store: memstore.New(time.Now)}
	g := newGuard(t, "rules:\n  - {name: r, action: export, key: [account], limit: 20, window: 1h, lease: {units: 5}, onStoreError: deny}\n", st, guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	req := guard.Request{Action: "export", Subject: guard.Subject{Account: "ann"}}
	d1, _ := g.Allow(ctx, req)
	d2, _ := g.Allow(ctx, req)
	if !d2.Allowed || !d2.Rules[0].Leased {
		t.Fatalf("the second from the lease: %+v (first %+v)", d2, d1)
	}
	left := d2.Rules[0].Remaining
	if _, err := g.Settle(ctx, req, d2, guard.Void); err != nil {
		t.Fatal(err)
	}
	d3, _ := g.Allow(ctx, req)
	if !d3.Rules[0].Leased || d3.Rules[0].Remaining != left {
		t.Errorf("after a void: %d left of the lease, want %d (the void's unit back)", d3.Rules[0].Remaining, left)
	}
	if _, err := g.Settle(ctx, req, d3, guard.Success); err != nil {
		t.Fatal(err)
	}
	d4, _ := g.Allow(ctx, req)
	if d4.Rules[0].Remaining != left-1 {
		t.Errorf("after a success: %d left, want %d (a success keeps its unit)", d4.Rules[0].Remaining, left-1)
	}
	if _, err := g.Unblock(ctx, "account", guard.Subject{Account: "ann"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Settle(ctx, req, d4, guard.Void); err != nil {
		t.Errorf("a void after the lease was dropped: %v", err)
	}
}

// TestWhatTheBackstopDecidedIsSettledInTheBackstop: while the store
// fails, an attempt the backstop admitted and that then succeeded gives
// its failure back in the backstop (the store is not asked): the next
// attempt is admitted.
func TestWhatTheBackstopDecidedIsSettledInTheBackstop(t *testing.T) {
	st := &switchable{Store: memstore.New(time.Now)}
	g := newGuard(t, `rules:
  - {name: fails, action: login, key: [account], count: failures, limit: 1, window: 1h, onStoreError: allow}
  - {name: other, action: login, key: [ip], limit: 50, window: 1h, onStoreError: allow}
`, st, guard.Options{Secret: []byte(secret), Backstop: memstore.New(time.Now)})
	ctx := context.Background()
	req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann", IP: netip.MustParseAddr("203.0.113.9")}}
	st.down.Store(true)
	for i := range 3 {
		d, err := g.Allow(ctx, req)
		if err != nil || !d.Allowed || d.StoreError == nil {
			t.Fatalf("attempt %d while the store fails: %+v %v", i+1, d, err)
		}
		res, err := g.Settle(ctx, req, d, guard.Success)
		if err != nil || len(res) == 0 {
			t.Fatalf("settle %d: %+v %v", i+1, res, err)
		}
	}
	d, _ := g.Allow(ctx, req)
	if _, err := g.Settle(ctx, req, d, guard.Failure); err != nil {
		t.Fatal(err)
	}
	if d, _ := g.Allow(ctx, req); d.Allowed {
		t.Errorf("after a failure the backstop kept: %+v", d)
	}
}

// trustedGuard is a guard with rules for trusted and untrusted devices
// and a device token of ann's.
func trustedGuard(t *testing.T, rules string) (*guard.Guard, string) {
	t.Helper()
	g := newGuard(t, "rules:\n"+rules, memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
	tok, err := g.DeviceToken("ann", "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return g, tok
}

// TestADeviceRuleDecidesForItsDevicesOnly: a rule for trusted devices
// counts the requests with the account's token, and a denial an untrusted
// client earned (remembered in the deny cache) is never answered to the
// owner's trusted device.
func TestADeviceRuleDecidesForItsDevicesOnly(t *testing.T) {
	g, tok := trustedGuard(t, `  - {name: known, action: login, key: [account], limit: 1, window: 1h, when: {device: trusted}, onStoreError: deny}
  - {name: strangers, action: login, key: [account], limit: 1, window: 1h, when: {device: untrusted}, onStoreError: deny}
`)
	ctx := context.Background()
	stranger := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
	owner := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}, Device: tok}
	for i, want := range []bool{true, false, false} {
		d, err := g.Allow(ctx, stranger)
		if err != nil || d.Allowed != want {
			t.Fatalf("stranger %d: %+v %v", i+1, d, err)
		}
	}
	for i, want := range []bool{true, false} {
		d, err := g.Allow(ctx, owner)
		if err != nil || d.Allowed != want {
			t.Fatalf("the owner's device, attempt %d: %+v %v (after the stranger's denials)", i+1, d, err)
		}
		if !want && d.DeniedBy != "known" {
			t.Errorf("the owner's second is denied by %q, want known", d.DeniedBy)
		}
	}
}

// TestAnUnblockKeepsWhatTheAccountProved: an administrator's unblock of an
// account lifts its counters and lockouts but not the networks it proved
// nor a right password held for its code: a login from a new network is
// still asked for a step-up code (cleared, the account looked new, and a
// new account is let in from anywhere).
func TestAnUnblockKeepsWhatTheAccountProved(t *testing.T) {
	g := newGuard(t, `rules:
  - {name: fails, action: login, key: [account], count: failures, limit: 1, window: 1h, onStoreError: deny}
  - {name: stepup, action: login, key: [account], algorithm: distinct, of: ip/16, count: successes, limit: 1, remember: 20, window: 720h, mode: challenge, fallback: allow, onStoreError: deny}
  - {name: held, action: login, key: [account], count: held, limit: 1, window: 24h, mode: challenge, fallback: allow, onStoreError: deny}
`, memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	from := func(ip string) guard.Request {
		return guard.Request{Action: "login", Subject: guard.Subject{Account: "ann", IP: netip.MustParseAddr(ip)}}
	}
	home := from("203.0.113.9")
	d, err := g.Allow(ctx, home)
	if err != nil || !d.Allowed || d.Challenged {
		t.Fatalf("the first login: %+v %v", d, err)
	}
	if _, err := g.Settle(ctx, home, d, guard.Success); err != nil {
		t.Fatal(err)
	}
	away := from("198.51.100.7")
	d, _ = g.Allow(ctx, away)
	if !d.Challenged || d.ChallengedBy != "stepup" {
		t.Fatalf("a new network before the unblock: %+v", d)
	}
	g.Settle(ctx, away, d, guard.Held)
	names, err := g.Unblock(ctx, "account", guard.Subject{Account: "ann"})
	if err != nil || !slices.Equal(names, []string{"fails"}) {
		t.Fatalf("unblock: %v %v", names, err)
	}
	d, _ = g.Allow(ctx, from("192.0.2.1"))
	if !d.Challenged {
		t.Errorf("a new network after the unblock is let in without a code: %+v", d)
	}
	st, _ := g.Status(ctx, "account", guard.Subject{Account: "ann"})
	if len(st) != 3 {
		t.Errorf("the status still shows every rule on the account: %+v", st)
	}
}

// TestAddressesAtTheirEdges: every letter and digit range of an unquoted
// local part, and the reasons a domain or a number is refused.
func TestAddressesAtTheirEdges(t *testing.T) {
	if d, err := identity.ParseEmail("az.AZ.09@example.com"); err != nil || d.Address != "az.AZ.09@example.com" {
		t.Errorf("the ranges' ends: %+v %v", d, err)
	}
	for in, want := range map[string]string{
		"a@.":       "email domain is not a valid domain name",
		"a@..":      "email domain is not a valid domain name",
		"a@example": "email domain must have at least two labels",
	} {
		if _, err := identity.ParseEmail(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	cfg := config.Default()
	if _, err := identity.ParsePhone("+1 123 456 7890", cfg.OTP.SMS.Policy()); err == nil || !strings.Contains(err.Error(), "not a valid phone number") {
		t.Errorf("a number of no area code: %v", err)
	}
}

// TestAFailureCountIsNeverRemembered: a denial by a failure-counting rule
// is not kept in the deny cache: a success another process settles gives
// the attempt back, and this process's next request asks the store.
func TestAFailureCountIsNeverRemembered(t *testing.T) {
	const doc = "rules:\n  - {name: fails, action: login, key: [account], count: failures, limit: 1, window: 1h, onStoreError: deny}\n"
	shared := memstore.New(time.Now)
	a := newGuard(t, doc, shared, guard.Options{Secret: []byte(secret)})
	b := newGuard(t, doc, shared, guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
	d1, _ := a.Allow(ctx, req)
	if !d1.Allowed {
		t.Fatal(d1)
	}
	if d, _ := a.Allow(ctx, req); d.Allowed {
		t.Fatalf("the held attempt fills the rule: %+v", d)
	}
	if _, err := b.Settle(ctx, req, d1, guard.Success); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.Allow(ctx, req); !d.Allowed {
		t.Errorf("after another process settled the success: %+v", d)
	}
}

// TestLeasesAdmitExactlyTheLimit: two subjects' leases of one rule, taken
// in turns, admit each its limit, no less (one's refill must not drop
// the other's prepaid units) and no more.
func TestLeasesAdmitExactlyTheLimit(t *testing.T) {
	g := newGuard(t, "rules:\n  - {name: r, action: export, key: [account], limit: 20, window: 1h, lease: {units: 5}, onStoreError: deny}\n",
		memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	admitted := map[string]int{}
	for range 25 {
		for _, a := range []string{"ann", "bob"} {
			if d, _ := g.Allow(ctx, guard.Request{Action: "export", Subject: guard.Subject{Account: a}}); d.Allowed {
				admitted[a]++
			}
		}
	}
	if admitted["ann"] != 20 || admitted["bob"] != 20 {
		t.Errorf("admitted %v, want 20 each", admitted)
	}
}

// TestPacerAndElasticBounds: a pacer needs a store timeout; an elastic
// ratio's error names the ratio given, in percent.
func TestPacerAndElasticBounds(t *testing.T) {
	for _, c := range []struct {
		limit         int64
		per, deadline time.Duration
	}{{0, time.Second, time.Second}, {2, time.Microsecond, time.Second}, {2, time.Second, 0}} {
		if _, err := pacer.New(memstore.New(time.Now), "p", c.limit, c.per, c.deadline); err == nil {
			t.Errorf("a pacer of %d per %s, timeout %s", c.limit, c.per, c.deadline)
		}
	}
	_, err := config.Parse([]byte("rules:\n  - {name: r, action: otp.send, key: [destination], algorithm: sliding_window, count: failures, limit: 2, window: 24h, elastic: {ratio: 2000%}}\n"))
	if err == nil || !strings.Contains(err.Error(), "got 2000%") {
		t.Errorf("an elastic ratio of 2000%%: %v", err)
	}
}

// TestAHeldRightPasswordIsNoFailureOfItsNetwork: an attempt held for its
// step-up code (the password was right) counts on a network's failure
// ratio as a success, not as a failure nor as nothing (an office's
// unanswered challenges must not make it look like a stuffing network).
func TestAHeldRightPasswordIsNoFailureOfItsNetwork(t *testing.T) {
	remaining := func(o guard.Outcome) int64 {
		g := newGuard(t, "rules:\n  - {name: ratio, action: login, key: [ip], algorithm: ratio, limit: 50%, min: 4, window: 1h, onStoreError: deny}\n",
			memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
		ctx := context.Background()
		ip := netip.MustParseAddr("203.0.113.9")
		req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann", IP: ip}}
		for range 3 {
			d, _ := g.Allow(ctx, req)
			if _, err := g.Settle(ctx, req, d, o); err != nil {
				t.Fatal(err)
			}
		}
		st, err := g.Status(ctx, "ip", guard.Subject{IP: ip})
		if err != nil || len(st) != 1 {
			t.Fatalf("%+v %v", st, err)
		}
		return st[0].Remaining
	}
	held, success, void := remaining(guard.Held), remaining(guard.Success), remaining(guard.Void)
	if held != success || held == void {
		t.Errorf("remaining after three held attempts %d, three successes %d, three void %d: held must count as successes", held, success, void)
	}
}

// TestAnUntrustedClientsRepeatIsAnsweredFromTheCache: a client with no
// device token meets a rule keyed on the device as the account's
// untrusted bucket, whatever tokens exist: its denial is remembered and
// its repeat costs no store call (the cache is skipped only when a
// trusted token may pick another state).
func TestAnUntrustedClientsRepeatIsAnsweredFromTheCache(t *testing.T) {
	st := &switchable{Store: memstore.New(time.Now)}
	g := newGuard(t, "store: {denyCache: {ttl: 1m, size: 10}}\nrules:\n  - {name: per-device, action: login, key: [device], limit: 1, window: 1h, onStoreError: deny}\n", st, guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
	for i, want := range []bool{true, false} {
		if d, err := g.Allow(ctx, req); err != nil || d.Allowed != want {
			t.Fatalf("attempt %d: %+v %v", i+1, d, err)
		}
	}
	before := st.calls.Load()
	if d, err := g.Allow(ctx, req); err != nil || d.Allowed || !d.Rules[0].Cached || st.calls.Load() != before {
		t.Errorf("the repeat: %+v %v, %d store calls", d, err, st.calls.Load()-before)
	}
}

// TestWhatTheBackstopAdmittedLeasesNothing: while the store fails, the
// backstop admits from its own counts, and no unit of those becomes a
// lease: once the store answers again and says the budget is spent, the
// process denies (a lease from the backstop would admit past Redis).
func TestWhatTheBackstopAdmittedLeasesNothing(t *testing.T) {
	const doc = `rules:
  - {name: budget, action: export, key: [global], limit: 40, window: 1h, lease: {units: 8}, onStoreError: allow}
`
	mem := memstore.New(time.Now)
	st := &switchable{Store: mem}
	g := newGuard(t, doc, st, guard.Options{Secret: []byte(secret), Backstop: memstore.New(time.Now)})
	other := newGuard(t, doc, mem, guard.Options{Secret: []byte(secret), Backstop: memstore.New(time.Now)})
	ctx := context.Background()
	req := guard.Request{Action: "export", Subject: guard.Subject{Account: "a"}}
	st.down.Store(true)
	if d, err := g.Allow(ctx, req); err != nil || !d.Allowed || d.StoreError == nil {
		t.Fatalf("the backstop's answer: %+v %v", d, err)
	}
	st.down.Store(false)
	spent := 0
	for range 60 {
		if d, err := other.Allow(ctx, req); err == nil && d.Allowed {
			spent++
		}
	}
	if spent != 40 {
		t.Fatalf("another process spent %d of the budget of 40", spent)
	}
	if d, err := g.Allow(ctx, req); err != nil || d.Allowed {
		t.Errorf("once the store answers that the budget is spent: %+v %v", d, err)
	}
}

// TestADeniedDecisionLeasesNothing: a lease is granted only from units
// the store took for an admitted request. Behind a leased global budget
// of 40, every account's second request is denied by its own rule (the
// store takes nothing then): 40 accounts are admitted, and not one more.
func TestADeniedDecisionLeasesNothing(t *testing.T) {
	g := newGuard(t, `store: {denyCache: {ttl: 1ms, size: 10}}
rules:
  - {name: budget, action: export, key: [global], limit: 40, window: 1h, lease: {units: 8}, onStoreError: deny}
  - {name: once, action: export, key: [account], limit: 1, window: 1h, onStoreError: deny}
`, memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	admitted := 0
	for i := range 100 {
		req := guard.Request{Action: "export", Subject: guard.Subject{Account: fmt.Sprintf("a%d", i)}}
		for range 2 {
			d, err := g.Allow(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
	}
	if admitted != 40 {
		t.Errorf("%d admitted under a budget of 40", admitted)
	}
}

// TestAStrikeCountsOnTheUntrustedClientsRules: a failure settled without
// its decision (a strike: the Cognito trigger that saw a wrong password)
// counts as an untrusted client's, on the rules for untrusted clients and
// on those for every client, never on a rule for trusted devices only.
func TestAStrikeCountsOnTheUntrustedClientsRules(t *testing.T) {
	g := newGuard(t, `rules:
  - {name: untrusted, action: login, when: {device: untrusted}, key: [account], count: failures, limit: 2, window: 1h, onStoreError: deny, lockout: {initial: 10m, factor: 2, max: 1h}}
  - {name: everyone, action: login, key: [account], count: failures, limit: 3, window: 1h, onStoreError: deny, lockout: {initial: 10m, factor: 2, max: 1h}}
  - {name: trusted, action: login, when: {device: trusted}, key: [account], count: failures, limit: 1, window: 1h, onStoreError: deny, lockout: {initial: 10m, factor: 2, max: 1h}}
`, memstore.New(time.Now), guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
	res, err := g.Settle(ctx, req, guard.Decision{}, guard.Failure)
	if err != nil {
		t.Fatal(err)
	}
	var struck []string
	for _, r := range res {
		struck = append(struck, r.Rule)
	}
	if !slices.Equal(struck, []string{"untrusted", "everyone"}) {
		t.Errorf("a strike counted on %v, want [untrusted everyone]", struck)
	}
}

// TestAVoidAttemptEndsTheCachedDenialsItsRoomEnds: a distinct rule's
// denial of a new value is remembered per value; a void attempt that
// gives a held value back makes room in Redis, and the value denied
// before is admitted at once, not refused from this process's memory.
func TestAVoidAttemptEndsTheCachedDenialsItsRoomEnds(t *testing.T) {
	st := &switchable{Store: memstore.New(time.Now)}
	g := newGuard(t, `store: {denyCache: {ttl: 1m, size: 10}}
rules:
  - {name: accounts-per-ip, action: export, key: [ip], algorithm: distinct, of: account, limit: 1, window: 1h, onStoreError: deny}
`, st, guard.Options{Secret: []byte(secret)})
	ctx := context.Background()
	ip := netip.MustParseAddr("198.51.100.7")
	req := func(account string) guard.Request {
		return guard.Request{Action: "export", Subject: guard.Subject{Account: account, IP: ip}}
	}
	a, err := g.Allow(ctx, req("a"))
	if err != nil || !a.Allowed {
		t.Fatalf("a: %+v %v", a, err)
	}
	for i := range 2 {
		if d, err := g.Allow(ctx, req("b")); err != nil || d.Allowed || d.Rules[0].Cached != (i == 1) {
			t.Fatalf("b, try %d: %+v %v (the second from the cache)", i+1, d, err)
		}
	}
	if _, err := g.Settle(ctx, req("a"), a, guard.Void); err != nil {
		t.Fatal(err)
	}
	if d, err := g.Allow(ctx, req("b")); err != nil || !d.Allowed {
		t.Errorf("b once a's attempt is void: %+v %v", d, err)
	}
}

// heldStore holds the answer of the next call it is told to hold until
// the test lets it go: a decision answered late.
type heldStore struct {
	store.Store
	hold           atomic.Bool
	entered, letGo chan struct{}
}

func (s *heldStore) Do(ctx context.Context, ops []store.Op) ([]store.OpResult, error) {
	held := s.hold.CompareAndSwap(true, false)
	res, err := s.Store.Do(ctx, ops)
	if held {
		close(s.entered)
		<-s.letGo
	}
	return res, err
}

// clockedGuard is a guard on st that learns the store's time from its
// answers (Options.StoreClock, as the server runs), with one rule for
// untrusted devices: a decision says whether the device is trusted.
func clockedGuard(t *testing.T, st store.Store) *guard.Guard {
	t.Helper()
	return newGuard(t, `rules:
  - {name: strangers, action: login, key: [account], limit: 100, window: 1h, when: {device: untrusted}, onStoreError: deny}
`, st, guard.Options{Secret: []byte(secret), StoreClock: &store.Clock{}})
}

// TestATokenIssuedAfterARevocationIsTrusted: with Options.StoreClock (as
// the server runs), a token issued with no time after this process revoked
// the account's devices is issued after the revocation, in the store's
// time, and is trusted, even when a decision that began before the
// revocation is answered after it (its late answer put the estimate of
// the store's time behind by as long as it was held), and when it is
// issued at once (within the revocation's microsecond).
func TestATokenIssuedAfterARevocationIsTrusted(t *testing.T) {
	// the store's clock is an hour ahead of this process's
	st := &heldStore{Store: memstore.New(func() time.Time { return time.Now().Add(time.Hour) }),
		entered: make(chan struct{}), letGo: make(chan struct{})}
	g := clockedGuard(t, st)
	ctx := context.Background()
	ann := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
	if _, err := g.Allow(ctx, ann); err != nil { // the clock learns the store's time
		t.Fatal(err)
	}
	st.hold.Store(true)
	done := make(chan error)
	go func() {
		_, err := g.Allow(ctx, guard.Request{Action: "login", Subject: guard.Subject{Account: "bob"}})
		done <- err
	}()
	<-st.entered
	time.Sleep(20 * time.Millisecond) // the revocation comes 20ms after
	if err := g.RevokeDevices(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	close(st.letGo)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tok, err := g.DeviceToken("ann", "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ann.Device = tok
	if d, err := g.Allow(ctx, ann); err != nil || d.Device != guard.DeviceTrusted {
		t.Fatalf("a token issued after the revocation: %+v %v", d, err)
	}
	untrusted := 0
	for range 200 {
		if err := g.RevokeDevices(ctx, "ann"); err != nil {
			t.Fatal(err)
		}
		ann.Device, _ = g.DeviceToken("ann", "", time.Time{})
		if d, err := g.Allow(ctx, ann); err != nil || d.Device != guard.DeviceTrusted {
			untrusted++
		}
	}
	if untrusted > 0 {
		t.Errorf("tokens issued at once after a revocation: %d of 200 untrusted", untrusted)
	}
}

// TestATokenIssuedBeforeARevocationIsUntrustedAfterAClockStep: the store's
// clock steps back 2s (a failover to a node set behind); a token issued
// with no time after the step and before a revocation is untrusted after
// the revocation: this process's estimate of the store's time follows the
// step, it is not held where it was.
func TestATokenIssuedBeforeARevocationIsUntrustedAfterAClockStep(t *testing.T) {
	var shift atomic.Int64
	st := memstore.New(func() time.Time { return time.Now().Add(time.Hour + time.Duration(shift.Load())) })
	g := clockedGuard(t, st)
	ctx := context.Background()
	ann := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
	if _, err := g.Allow(ctx, ann); err != nil {
		t.Fatal(err)
	}
	shift.Store(int64(-2 * time.Second))
	if _, err := g.Allow(ctx, guard.Request{Action: "login", Subject: guard.Subject{Account: "bob"}}); err != nil {
		t.Fatal(err)
	}
	before, _ := g.DeviceToken("ann", "", time.Time{})
	time.Sleep(time.Millisecond)
	if err := g.RevokeDevices(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	ann.Device = before
	if d, err := g.Allow(ctx, ann); err != nil || d.Device != guard.DeviceUntrusted {
		t.Fatalf("a token issued before the revocation, after the step: %+v %v", d, err)
	}
}

// TestATokenIsIssuedNearARememberedRevocationOnly: the revocation this process
// remembers (see TestATokenIssuedAfterARevocationIsTrusted) moves a
// token's issue time by up to a second, never more. The store's clock
// steps back 2s after a revocation (a failover): a token issued with no
// time, then a revocation: the token is revoked (it was issued before
// it). A revocation answered an hour ahead (a node's clock set wrong): a
// token issued with no time after it is issued at the estimate, untrusted
// until the store's clock passes the revocation, not an hour ahead with
// its life stretched by the hour.
func TestATokenIsIssuedNearARememberedRevocationOnly(t *testing.T) {
	for _, c := range []struct {
		name        string
		at, after   time.Duration // the store's clock at the revocation, and after it
		revokeAgain bool
	}{{"a step back 2s", 0, -2 * time.Second, true}, {"an hour ahead", time.Hour, 0, false}} {
		var shift atomic.Int64
		st := memstore.New(func() time.Time { return time.Now().Add(time.Duration(shift.Load())) })
		g := clockedGuard(t, st)
		ctx := context.Background()
		ann := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
		shift.Store(int64(c.at))
		if err := g.RevokeDevices(ctx, "ann"); err != nil {
			t.Fatal(err)
		}
		shift.Store(int64(c.after))
		if _, err := g.Allow(ctx, guard.Request{Action: "login", Subject: guard.Subject{Account: "bob"}}); err != nil {
			t.Fatal(err)
		}
		ann.Device, _ = g.DeviceToken("ann", "", time.Time{})
		time.Sleep(time.Millisecond)
		if c.revokeAgain {
			if err := g.RevokeDevices(ctx, "ann"); err != nil {
				t.Fatal(err)
			}
		}
		if d, err := g.Allow(ctx, ann); err != nil || d.Device != guard.DeviceUntrusted {
			t.Errorf("%s: %+v %v, want an untrusted device", c.name, d, err)
		}
	}
}
