package guard

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

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
