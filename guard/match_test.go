package guard

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/store"
)

// TestTheRuleListsMatchKeepsAreRightAndBounded: the lists of an action's
// rules that filters and partial requests leave are kept and given again
// (the same slice), each the rules that apply, and no more than maxLists
// of them are kept: here 41 purposes × 32 sets of present values make
// 1312 lists, each asked twice.
func TestTheRuleListsMatchKeepsAreRightAndBounded(t *testing.T) {
	c := Config{StoreTimeout: time.Second, DenyCacheTTL: time.Second, DenyCacheSize: 10, IPv6Prefix: 64, DeviceTTL: time.Hour}
	add := func(name string, key []string, when map[string][]string) {
		c.Rules = append(c.Rules, Rule{Name: name, Action: "a", Key: key, Limit: 2, Window: time.Minute, When: when,
			Algorithm: store.FixedWindow, Count: CountRequests, Mode: ModeEnforce, OnStoreError: "deny"})
	}
	dims := []string{"destination", "country", "prefix", "account", "ip"}
	for _, d := range dims {
		add("per-"+d, []string{d}, nil)
	}
	for p := range 41 {
		add(fmt.Sprint("purpose-", p), []string{"global"}, map[string][]string{"purpose": {fmt.Sprint("p", p)}})
	}
	g, err := New(c, nopStore{}, Options{Secret: []byte("0123456789abcdef"), Backstop: nopStore{}})
	if err != nil {
		t.Fatal(err)
	}
	request := func(p, present int) Request {
		var s Subject
		if present&1 != 0 {
			s.Destination.Key = "+12015550123"
		}
		if present&2 != 0 {
			s.Destination.Country = "US"
		}
		if present&4 != 0 {
			s.Destination.Prefix = "+1201555"
		}
		if present&8 != 0 {
			s.Account = "ann"
		}
		if present&16 != 0 {
			s.IP = netip.MustParseAddr("192.0.2.1")
		}
		return Request{Action: "a", Subject: s, Partial: true, Attributes: map[string]string{"purpose": fmt.Sprint("p", p)}}
	}
	first := map[[2]int][]*rule{}
	for round := range 2 {
		for p := range 41 {
			for present := range 32 {
				req := request(p, present)
				got := g.match(req, false)
				want := g.filter(g.byAction["a"], req, false)
				if !slices.Equal(got, want) {
					t.Fatalf("purpose %d, values %05b: %d rules, want %d", p, present, len(got), len(want))
				}
				k := [2]int{p, present}
				if round == 0 {
					first[k] = got
				} else if &got[0] != &first[k][0] && g.listKept(req) {
					t.Fatalf("purpose %d, values %05b: a kept list given anew", p, present)
				}
			}
		}
	}
	kept := 0
	g.lists.Range(func(any, any) bool { kept++; return true })
	if kept == 0 || kept > maxLists {
		t.Errorf("%d lists kept; want some, at most %d", kept, maxLists)
	}
}

// listKept reports whether match keeps req's list.
func (g *Guard) listKept(req Request) bool {
	var in uint64
	for i, r := range g.byAction[req.Action] {
		if g.applies(r, req, false) {
			in |= 1 << i
		}
	}
	_, ok := g.lists.Load(listKey{req.Action, in})
	return ok
}

// TestAnActionOfManyRulesKeepsItsList: an action of more than 64 rules,
// whose lists match does not keep, still gets its own list when every
// rule applies (no list built per request); and a cached denial of a
// list of more than 16 rules does not share its Rules (what the shared
// slots hold is bounded): each answer has its own.
func TestAnActionOfManyRulesKeepsItsList(t *testing.T) {
	c := Config{StoreTimeout: time.Second, DenyCacheTTL: time.Minute, DenyCacheSize: 10, IPv6Prefix: 64, DeviceTTL: time.Hour}
	for i := range 65 {
		c.Rules = append(c.Rules, Rule{Name: fmt.Sprint("r", i), Action: "a", Key: []string{"account"}, Limit: int64(1 + i), Window: time.Hour,
			Algorithm: store.FixedWindow, Count: CountRequests, Mode: ModeEnforce, OnStoreError: "deny"})
	}
	now := time.Unix(1e9, 0)
	g, err := New(c, memstore.New(func() time.Time { return now }), Options{Secret: []byte("0123456789abcdef"), Backstop: nopStore{}, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Action: "a", Subject: Subject{Account: "ann"}}
	if got := g.match(req, false); len(got) != 65 || &got[0] != &g.byAction["a"][0] {
		t.Errorf("65 rules that all apply: a list of %d built anew", len(got))
	}
	ctx := t.Context()
	g.Allow(ctx, req)
	g.Allow(ctx, req) // denied by r0, remembered
	d1, _ := g.Allow(ctx, req)
	d2, _ := g.Allow(ctx, req)
	if !d1.Rules[0].Cached || !d2.Rules[0].Cached {
		t.Fatalf("not answered from the cache: %+v", d1.Rules[0])
	}
	if &d1.Rules[0] == &d2.Rules[0] {
		t.Error("the Rules of 65 rules were shared")
	}
}

// TestASuccessLeavesTheDenyCacheAlone: a login's success resets its
// failure counts (an unblock of those rules' states), which the deny
// cache never holds: it drops nothing and scans nothing, and stops the
// learning of no state.
func TestASuccessLeavesTheDenyCacheAlone(t *testing.T) {
	c := Config{StoreTimeout: time.Second, DenyCacheTTL: time.Minute, DenyCacheSize: 10, IPv6Prefix: 64, DeviceTTL: time.Hour}
	c.Rules = append(c.Rules, Rule{Name: "fails", Action: "login", Key: []string{"account"}, Limit: 5, Window: time.Hour,
		Algorithm: store.FixedWindow, Count: CountFailures, ResetOnSuccess: true, Mode: ModeEnforce, OnStoreError: "deny"})
	now := time.Unix(1e9, 0)
	g, err := New(c, memstore.New(func() time.Time { return now }), Options{Secret: []byte("0123456789abcdef"), Backstop: nopStore{}, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Action: "login", Subject: Subject{Account: "ann"}}
	d, err := g.Allow(t.Context(), req)
	if err != nil || !d.Allowed {
		t.Fatal(err, d)
	}
	k := denyKey{id: g.all[0].spec.ID, tag: tagKeyOf(d.Rules[0].tag)}
	before := g.cache.genOf(k)
	if _, err := g.Settle(t.Context(), req, d, Success); err != nil {
		t.Fatal(err)
	}
	if after := g.cache.genOf(k); after != before {
		t.Errorf("a success counted %d drops of a state the cache never holds", after-before)
	}
}
