package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
)

// TestACachedDenialsRulesAreSharedForAMoment: the cached denials of one
// entry share their Rules for up to 100ms (Decision.Rules): the first
// answer's denying rule has the exact RetryAfter; one 50ms later gets
// the same slice (its RetryAfter as of the first) and its own exact
// Decision.RetryAfter; one 150ms later gets new Rules, exact again.
func TestACachedDenialsRulesAreSharedForAMoment(t *testing.T) {
	now := time.Unix(1e9, 0)
	clock := func() time.Time { return now }
	g := newGuard(t, "store: {denyCache: {ttl: 1m, size: 10}}\nrules:\n  - {name: free, action: login, key: [account], limit: 5, window: 1h, onStoreError: deny}\n"+
		"  - {name: r, action: login, key: [account], limit: 1, window: 1h, onStoreError: deny}\n", memstore.New(clock), guard.Options{Secret: []byte(secret), Clock: clock})
	ctx := context.Background()
	req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
	allow := func() guard.Decision {
		d, err := g.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	allow()
	if d := allow(); d.Allowed || d.Rules[1].Cached {
		t.Fatalf("the second is denied by the store: %+v", d)
	}
	exact := func(what string, d guard.Decision) {
		t.Helper()
		if d.Allowed || !d.Rules[1].Cached || d.DeniedBy != "r" || !d.Rules[0].Skipped || d.Rules[0].Rule != "free" {
			t.Fatalf("%s: not a cached denial by r: %+v", what, d)
		}
		if d.Rules[1].RetryAfter != d.RetryAfter {
			t.Errorf("%s: the rule's RetryAfter %v, the decision's %v", what, d.Rules[1].RetryAfter, d.RetryAfter)
		}
	}
	first := allow()
	exact("the first cached", first)
	now = now.Add(50 * time.Millisecond)
	second := allow()
	if &second.Rules[0] != &first.Rules[0] {
		t.Error("50ms later: the Rules are not shared")
	}
	if second.RetryAfter != first.RetryAfter-50*time.Millisecond {
		t.Errorf("50ms later: RetryAfter %v, want %v", second.RetryAfter, first.RetryAfter-50*time.Millisecond)
	}
	now = now.Add(100 * time.Millisecond)
	third := allow()
	exact("150ms later", third)
	if &third.Rules[0] == &first.Rules[0] {
		t.Error("150ms later: still the first answer's Rules")
	}
}

// TestACachedDenialListsItsOwnRules: two requests of one action whose
// filters leave different rules (as many of them) meet the same cached
// denial; each answer lists its own request's rules, not the rules the
// entry answered before.
func TestACachedDenialListsItsOwnRules(t *testing.T) {
	now := time.Unix(1e9, 0)
	clock := func() time.Time { return now }
	g := newGuard(t, "store: {denyCache: {ttl: 1m, size: 10}}\nrules:\n  - {name: r, action: login, key: [account], limit: 1, window: 1h, onStoreError: deny}\n"+
		"  - {name: for-email, action: login, key: [account], limit: 5, window: 1h, when: {channel: [email]}, onStoreError: deny}\n"+
		"  - {name: for-sms, action: login, key: [account], limit: 5, window: 1h, when: {channel: [sms]}, onStoreError: deny}\n",
		memstore.New(clock), guard.Options{Secret: []byte(secret), Clock: clock})
	ctx := context.Background()
	req := func(channel string) guard.Request {
		return guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}, Attributes: map[string]string{"channel": channel}}
	}
	g.Allow(ctx, req("email"))
	g.Allow(ctx, req("email")) // denied by r, remembered
	for _, ch := range []string{"email", "sms", "email", "sms"} {
		d, err := g.Allow(ctx, req(ch))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || !d.Rules[0].Cached || len(d.Rules) != 2 || d.Rules[1].Rule != "for-"+ch {
			t.Errorf("channel %s: %+v", ch, d.Rules)
		}
	}
}
