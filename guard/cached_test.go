package guard_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/store"
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

// TestCachedDenialsOfManySubjectsKeepTheirOwnRules: the shared Rules are
// kept in slots by a hash of the entry's key (a bounded number of them),
// so subjects meet in a slot: 400 subjects denied at different moments
// (so that their retry-afters differ), asked in turn at one instant, each
// get their own denial's Rules, exact.
func TestCachedDenialsOfManySubjectsKeepTheirOwnRules(t *testing.T) {
	now := time.Unix(1e9, 0)
	clock := func() time.Time { return now }
	g := newGuard(t, "store: {denyCache: {ttl: 1m, size: 1000}}\nrules:\n  - {name: free, action: login, key: [ip], limit: 10000, window: 1h, onStoreError: deny}\n"+
		"  - {name: r, action: login, key: [account], limit: 1, window: 1h, onStoreError: deny}\n", memstore.New(clock), guard.Options{Secret: []byte(secret), Clock: clock})
	ctx := context.Background()
	req := func(i int) guard.Request {
		return guard.Request{Action: "login", Subject: guard.Subject{Account: fmt.Sprint("user", i), IP: netip.MustParseAddr("192.0.2.1")}}
	}
	const n = 400
	for i := range n {
		for range 2 {
			if _, err := g.Allow(ctx, req(i)); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(100 * time.Millisecond) // each denial's retry-after differs (all within the cache's minute)
	}
	for round := range 2 {
		for i := range n {
			d, err := g.Allow(ctx, req(i))
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || !d.Rules[1].Cached || d.Rules[1].RetryAfter != d.RetryAfter {
				t.Fatalf("round %d, user%d: rule %+v, decision's RetryAfter %v", round, i, d.Rules[1], d.RetryAfter)
			}
		}
	}
}

// held is a store whose next call, once armed, waits for release after
// it is answered: a decision in flight while something else happens.
type held struct {
	store.Store
	arm               atomic.Bool
	answered, release chan struct{}
}

func (h *held) Do(ctx context.Context, ops []store.Op) ([]store.OpResult, error) {
	res, err := h.Store.Do(ctx, ops)
	if h.arm.CompareAndSwap(true, false) {
		h.answered <- struct{}{}
		<-h.release
	}
	return res, err
}

// TestADenialInFlightDuringADropIsNotCached: a denial the store answers
// while an unblock (or a refund) is made through this process is not
// remembered: it may be what the unblock ended, and the next request asks
// the store, which allows it.
func TestADenialInFlightDuringADropIsNotCached(t *testing.T) {
	for _, how := range []string{"unblock", "void"} {
		now := time.Unix(1e9, 0)
		clock := func() time.Time { return now }
		h := &held{Store: memstore.New(clock), answered: make(chan struct{}), release: make(chan struct{})}
		g, req, first := allowedOnce(t, h, clock)
		ctx := context.Background()
		h.arm.Store(true)
		done := make(chan guard.Decision)
		go func() {
			d, _ := g.Allow(ctx, req)
			done <- d
		}()
		<-h.answered // the store denied; the decision is not learnt yet
		if err := change(ctx, g, how, req, first); err != nil {
			t.Fatal(err)
		}
		close(h.release)
		if d := <-done; d.Allowed {
			t.Fatalf("%s: the request in flight was allowed", how)
		}
		if d, _ := g.Allow(ctx, req); !d.Allowed || d.Rules[0].Cached {
			t.Errorf("%s: the next request after it: %+v, want allowed by the store", how, d.Rules[0])
		}
		// and the cache learns this state's denials again
		if d, _ := g.Allow(ctx, req); d.Allowed || d.Rules[0].Cached {
			t.Fatalf("%s: the limit's next request: %+v, want denied by the store", how, d.Rules[0])
		}
		if d, _ := g.Allow(ctx, req); d.Allowed || !d.Rules[0].Cached {
			t.Errorf("%s: after the change, a denial is no longer cached: %+v", how, d.Rules[0])
		}
	}
}

// slowChange is a store whose unblocks and refunds wait for release
// before they reach it, once armed: a decision made meanwhile reads the
// state before the change.
type slowChange struct {
	store.Store
	arm              atomic.Bool
	waiting, release chan struct{}
}

func (s *slowChange) Do(ctx context.Context, ops []store.Op) ([]store.OpResult, error) {
	if k := ops[0].Kind; (k == store.Unblock || k == store.Refund || k == store.Cancel) && s.arm.CompareAndSwap(true, false) {
		s.waiting <- struct{}{}
		<-s.release
	}
	return s.Store.Do(ctx, ops)
}

// TestADenialReadBeforeAnUnblockLandsIsNotKept: a decision made while an
// unblock (or a refund) made through this process is on its way to the
// store reads the denial the change ends; what it caches is dropped once
// the change has landed, and the next request asks the store, which
// allows it.
func TestADenialReadBeforeAnUnblockLandsIsNotKept(t *testing.T) {
	for _, how := range []string{"unblock", "void"} {
		now := time.Unix(1e9, 0)
		clock := func() time.Time { return now }
		s := &slowChange{Store: memstore.New(clock), waiting: make(chan struct{}), release: make(chan struct{})}
		g, req, first := allowedOnce(t, s, clock)
		ctx := context.Background()
		s.arm.Store(true)
		done := make(chan error)
		go func() { done <- change(ctx, g, how, req, first) }()
		select {
		case <-s.waiting: // the change is on its way
		case err := <-done:
			t.Fatalf("%s: the change never reached the store: %v", how, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the change never reached the store", how)
		}
		if d, _ := g.Allow(ctx, req); d.Allowed {
			t.Fatalf("%s: allowed before the change landed", how)
		}
		close(s.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if d, _ := g.Allow(ctx, req); !d.Allowed || d.Rules[0].Cached {
			t.Errorf("%s: the next request after the change: %+v, want allowed by the store", how, d.Rules[0])
		}
	}
}

// allowedOnce is a guard on st with one rule (ann's account, limit 1, its
// denials cached for a minute) and ann's first request, allowed.
func allowedOnce(t *testing.T, st store.Store, clock func() time.Time) (*guard.Guard, guard.Request, guard.Decision) {
	t.Helper()
	g := newGuard(t, "store: {denyCache: {ttl: 1m, size: 10}}\nrules:\n  - {name: r, action: login, key: [account], limit: 1, window: 1h, onStoreError: deny}\n",
		st, guard.Options{Secret: []byte(secret), Clock: clock})
	req := guard.Request{Action: "login", Subject: guard.Subject{Account: "ann"}}
	first, err := g.Allow(context.Background(), req)
	if err != nil || !first.Allowed {
		t.Fatalf("the first is denied: %v", err)
	}
	return g, req, first
}

// change ends what req's first decision took, through g: an unblock of
// its account, or the decision settled as void (a refund).
func change(ctx context.Context, g *guard.Guard, how string, req guard.Request, first guard.Decision) error {
	var err error
	switch how {
	case "unblock":
		_, err = g.Unblock(ctx, "account", req.Subject)
	case "void":
		_, err = g.Settle(ctx, req, first, guard.Void)
	}
	return err
}
