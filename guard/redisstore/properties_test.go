package redisstore_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/store"
)

// The algorithms' properties, as a table run against both implementations
// of every algorithm: the Lua library (on the embedded Redis, whose clock
// the test moves) and memstore (the backstop, on the same fixed clock). A
// mistake made in both would pass their differential test; it fails here.

// env is one implementation and its clock.
type env struct {
	store   store.Store
	advance func(time.Duration)
	now     func() time.Time
}

func envs(t *testing.T) map[string]func() env {
	return map[string]func() env{
		"lua": func() env {
			c, st := newFixedClock(t)
			return env{st, c.advance, func() time.Time { return c.now }}
		},
		"memstore": func() env {
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			return env{memstore.New(func() time.Time { return now }), func(d time.Duration) { now = now.Add(d) }, func() time.Time { return now }}
		},
	}
}

func (e env) guard(t *testing.T, rules string) *guard.Guard {
	t.Helper()
	cfg := parseConfig(t, "store: {timeout: 10s, denyCache: {ttl: 0s}}\nrules:\n"+rules)
	g, err := guard.New(cfg.Engine(), e.store, guard.Options{Secret: secret, Backstop: memstore.New(e.now)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func req(action, account string) guard.Request {
	return guard.Request{Action: action, Subject: guard.Subject{Account: account, IP: netip.MustParseAddr("192.0.2.90")}}
}

var properties = []struct {
	name string
	test func(t *testing.T, e env)
}{
	{"a lockout ending hands out one try, not a fresh budget", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: l, action: a, key: [account], count: failures, limit: 3, window: 1h, lockout: {initial: 10s, factor: 2, max: 1m, reset: 1h}}\n")
		r := req("a", "x")
		for range 3 {
			d := allow(t, g, r)
			g.Settle(context.Background(), r, d, guard.Failure)
		}
		e.advance(10 * time.Second)
		d := allow(t, g, r)
		if !d.Allowed {
			t.Fatalf("after the lockout: %+v", d)
		}
		res, _ := g.Settle(context.Background(), r, d, guard.Failure)
		if len(res) == 0 || !res[0].Locked || res[0].RetryAfter != 20*time.Second {
			t.Fatalf("the try after a lockout failed: want a lockout of 20s at once, got %+v", res)
		}
	}},
	{"a challenge holds its take back until the proof; an account's set keeps the networks it proved", func(t *testing.T, e env) {
		networksProved(t, e.guard(t, networksRule))
	}},
	{"a proven, then void, challenged attempt leaves the state as it was", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: c, action: login, key: [account], limit: 1, window: 1h, mode: challenge, fallback: allow}\n"+
			"  - {name: f, action: login, key: [account], count: failures, limit: 1, window: 1h, mode: challenge, fallback: allow}\n")
		r := req("login", "x")
		allow(t, g, r)
		for range 3 {
			if d := allow(t, g, r); !d.Challenged || d.Rules[1].Remaining != 0 {
				t.Fatalf("a challenged request: %+v", d)
			}
		}
		st, _ := g.Status(context.Background(), "account", r.Subject)
		d := allow(t, g, r)
		proven, err := g.Prove(context.Background(), r, d)
		if err != nil || proven.Challenged {
			t.Fatalf("prove: %+v %v", proven, err)
		}
		if _, err := g.Settle(context.Background(), r, proven, guard.Void); err != nil {
			t.Fatal(err)
		}
		if after, _ := g.Status(context.Background(), "account", r.Subject); fmt.Sprint(after) != fmt.Sprint(st) {
			t.Fatalf("a proven then void attempt changed the state: %+v, was %+v", after, st)
		}
	}},
	{"a held login challenges the account until it is proven", func(t *testing.T, e env) {
		heldUntilProven(t, e.guard(t, heldRules))
	}},
	{"a distinct value already seen costs nothing", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: d, action: a, key: [ip], of: account, algorithm: distinct, limit: 2, window: 1h}\n")
		allow(t, g, req("a", "x"))
		allow(t, g, req("a", "y"))
		if d := allow(t, g, req("a", "z")); d.Allowed {
			t.Fatal("a third value admitted")
		}
		for range 3 {
			if d := allow(t, g, req("a", "x")); !d.Allowed || d.Rules[0].Remaining != 0 {
				t.Fatalf("a value seen again: %+v", d)
			}
		}
	}},
	{"the denying rule placed last consumes nothing of the earlier ones", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: first, action: a, key: [ip], limit: 10, window: 1h}\n  - {name: last, action: a, key: [account], limit: 1, window: 1h}\n")
		allow(t, g, req("a", "x"))
		for range 5 {
			if d := allow(t, g, req("a", "x")); d.Allowed || d.DeniedBy != "last" {
				t.Fatalf("want last to deny: %+v", d)
			}
		}
		if d := allow(t, g, req("a", "other")); d.Rules[0].Remaining != 8 {
			t.Fatalf("the first rule after 5 denials by the last: %d left, want 8", d.Rules[0].Remaining)
		}
	}},
	{"a void attempt gives back every rule's units", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: req, action: a, key: [ip], limit: 3, window: 1h}\n  - {name: fail, action: a, key: [account], count: failures, limit: 3, window: 1h}\n")
		for range 5 {
			d := allow(t, g, req("a", "x"))
			if !d.Allowed {
				t.Fatalf("void attempts used the budget: %+v", d)
			}
			g.Settle(context.Background(), req("a", "x"), d, guard.Void)
		}
	}},
	{"an outcome reported without the decision settles it", func(t *testing.T, e env) {
		rules := "  - {name: fail, action: a, key: [account], count: failures, limit: 2, window: 1h}\n"
		decider, other := e.guard(t, rules), e.guard(t, rules)
		for range 5 {
			if d := allow(t, decider, req("a", "x")); !d.Allowed {
				t.Fatalf("successes reported through another process did not count: %+v", d)
			}
			other.Settle(context.Background(), req("a", "x"), guard.Decision{}, guard.Success)
		}
	}},
	{"a release frees the slot", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: c, action: a, key: [ip], limit: 1, window: 1h, algorithm: concurrency}\n")
		for range 5 {
			d := allow(t, g, req("a", "x"))
			if !d.Allowed {
				t.Fatalf("after releases: %+v", d)
			}
			if err := g.Release(context.Background(), req("a", "x"), d.Lease); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"a success on a resetOnSuccess pair clears its failures and lockouts", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: p, action: a, key: [account, ip], count: failures, limit: 2, window: 1h, resetOnSuccess: true, lockout: {initial: 10s, factor: 2, max: 1m}}\n")
		r := req("a", "x")
		for range 2 {
			d := allow(t, g, r)
			g.Settle(context.Background(), r, d, guard.Failure)
		}
		e.advance(10 * time.Second)
		d := allow(t, g, r)
		g.Settle(context.Background(), r, d, guard.Success)
		d = allow(t, g, r)
		if res, _ := g.Settle(context.Background(), r, d, guard.Failure); len(res) > 0 && res[0].Locked {
			t.Fatalf("the first failure after a success locked: %+v", res)
		}
	}},
	{"a count denial of a lockout rule tells the coming lockout, not the window", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: l, action: a, key: [account], count: failures, limit: 2, window: 1h, lockout: {initial: 1m, factor: 2, max: 15m}}\n")
		r := req("a", "x")
		allow(t, g, r) // two attempts in flight: the limit is reached
		allow(t, g, r)
		if d := allow(t, g, r); d.Allowed || d.RetryAfter > time.Minute {
			t.Fatalf("the third, while two failures are in flight: %+v, want a retry of at most the 1m lockout", d)
		}
	}},
	{"a denied decision reports the rules it allowed as they stand, nothing taken", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: acct, action: a, key: [account], limit: 10, window: 1h}\n  - {name: ip, action: a, key: [ip], limit: 1, window: 1h}\n")
		if d := allow(t, g, req("a", "x")); !d.Allowed {
			t.Fatalf("the first: %+v", d)
		}
		e.advance(10 * time.Minute)
		// an account seen before: its count and window as they were
		if d := allow(t, g, req("a", "x")); d.Allowed || d.DeniedBy != "ip" || !d.Rules[0].Allowed || d.Rules[0].Remaining != 9 || d.Rules[0].ResetAfter != 50*time.Minute {
			t.Fatalf("the account seen before, denied by ip: %+v, want acct allowed with 9 left for 50m", d)
		}
		// a new account: nothing there, and nothing left there
		if d := allow(t, g, req("a", "y")); d.Allowed || d.DeniedBy != "ip" || !d.Rules[0].Allowed || d.Rules[0].Remaining != 10 || d.Rules[0].ResetAfter != 0 {
			t.Fatalf("a new account, denied by ip: %+v, want acct allowed with 10 left and nothing to reset", d)
		}
		for _, a := range []string{"x", "y"} {
			if st, _ := g.Status(context.Background(), "account", req("a", a).Subject); len(st) != 1 || st[0].Remaining != 10-btoi(a == "x") {
				t.Fatalf("account %s after the denials: %+v", a, st)
			}
		}
	}},
	{"a status tells the state as it stands", func(t *testing.T, e env) {
		g := e.guard(t, "  - {name: tb, action: a, key: [ip], count: failures, limit: 100, window: 24h, algorithm: token_bucket}\n  - {name: fw, action: a, key: [ip], limit: 5, window: 1h}\n")
		s := req("a", "x").Subject
		st, _ := g.Status(context.Background(), "ip", s)
		if st[0].Remaining != 100 || st[0].ResetAfter != 0 || st[1].Remaining != 5 || st[1].ResetAfter != 0 {
			t.Fatalf("fresh: %+v", st)
		}
		d := allow(t, g, req("a", "x"))
		g.Settle(context.Background(), req("a", "x"), d, guard.Failure)
		st, _ = g.Status(context.Background(), "ip", s)
		if st[0].Remaining != 99 || st[0].ResetAfter != 24*time.Hour/100 || st[1].Remaining != 4 || st[1].ResetAfter != time.Hour {
			t.Fatalf("after one failure: %+v", st)
		}
	}},
}

func TestAlgorithmProperties(t *testing.T) {
	for _, p := range properties {
		t.Run(p.name, func(t *testing.T) {
			for name, newEnv := range envs(t) {
				t.Run(name, func(t *testing.T) { p.test(t, newEnv()) })
			}
		})
	}
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
