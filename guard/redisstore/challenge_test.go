package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
)

// A rule in mode challenge never denies: past its limit it flags the
// request (Challenged). What it would take waits for the proof: a
// request-counting rule takes nothing while challenged (asking again is
// challenged again), and the proof commits the take; a failure-counting
// rule counts the attempt as a failure at once, as any of its attempts.
// An enforcing rule still denies, and then nothing is counted, the
// challenge rule's units included.
func TestAChallengeRuleFlagsAndWaitsForTheProof(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), `
  - {name: stepup, action: login, key: [account], limit: 2, window: 1h, mode: challenge, fallback: allow}
  - {name: failures, action: login, key: [account], count: failures, limit: 2, window: 1h, mode: challenge, fallback: allow}
  - {name: per-ip, action: login, key: [ip], limit: 7, window: 1h}
`)
		ctx := context.Background()
		r := loginAt("x", "192.0.2.10")
		for i := range 6 {
			d := allow(t, g, r)
			if !d.Allowed {
				t.Fatalf("request %d denied: %+v", i, d)
			}
			if want := i >= 2; d.Challenged != want || (want && d.ChallengedBy != "stepup") {
				t.Fatalf("request %d: challenged %v (%s), want %v", i, d.Challenged, d.ChallengedBy, want)
			}
		}
		// the fixed windows' counts: a key of its own, or a packed
		// hash's <id>c fields
		counters := func() map[string]int {
			out := map[string]int{}
			for k, v := range dump(t, rdb) {
				if !strings.HasPrefix(v, "map[") {
					out[ownCount(k, v)]++
					continue
				}
				for _, f := range strings.Fields(strings.Trim(v, "map[]")) {
					if name, n, ok := strings.Cut(f, ":"); ok && len(name) == 3 && strings.HasSuffix(name, "c") {
						out[n]++
					}
				}
			}
			return out
		}
		// stepup holds 2 (the challenged asked again and again took
		// nothing); failures counted all 6; per-ip 6.
		if c := counters(); c["2"] != 1 || c["6"] != 2 {
			t.Fatalf("after 2 admitted and 4 challenged: counters %v, want stepup at 2, failures and per-ip at 6", dump(t, rdb))
		}
		// The proof commits the held take (and only the held one).
		d := allow(t, g, r)
		if !d.Challenged {
			t.Fatalf("the 7th is not challenged: %+v", d)
		}
		proven, err := g.Prove(ctx, r, d)
		if err != nil {
			t.Fatal(err)
		}
		if proven.Challenged || !proven.Allowed || proven.Rules[0].Challenged || !proven.Rules[0].Allowed {
			t.Fatalf("the proven decision: %+v", proven)
		}
		if c := counters(); c["3"] != 1 || c["7"] != 2 {
			t.Fatalf("after the proof: counters %v, want stepup at 3, failures and per-ip at 7", dump(t, rdb))
		}
		// A void attempt, once proven, gives back what the proof took.
		if _, err := g.Settle(ctx, r, proven, guard.Void); err != nil {
			t.Fatal(err)
		}
		if c := counters(); c["2"] != 1 || c["6"] != 2 {
			t.Fatalf("after voiding the proven attempt: counters %v, want 2, 6, 6", dump(t, rdb))
		}
		// per-ip denies: nothing counted, the challenge rule's included.
		allow(t, g, r)
		before := dump(t, rdb)
		for range 3 {
			if d := allow(t, g, r); d.Allowed || d.DeniedBy != "per-ip" || d.Challenged {
				t.Fatalf("past per-ip: %+v", d)
			}
		}
		if after := dump(t, rdb); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("denied requests were counted:\nbefore %v\nafter  %v", before, after)
		}
	})
}

// The networks an account proved: a distinct challenge rule that counts
// successes, limit 1 (the first network is taken on trust), remember 3.
// A stranger's network is challenged as often as it asks and never
// enters the set, whether the password was wrong (Failure) or right but
// never proven (Held); the owner's home stays; a network proven with a
// code (the held login's receipt) joins the set without pushing home out.
func TestTheNetworksAnAccountProved(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		networksProved(t, newGuard(t, newStore(rdb), networksRule))
	})
}

const networksRule = `
  - {name: stepup, action: login, key: [account], algorithm: distinct, of: ip/16, count: successes, limit: 1,
     remember: 3, window: 720h, mode: challenge, fallback: allow}
`

// networksProved is TestTheNetworksAnAccountProved's scenario, also one of
// the properties both implementations must have.
func networksProved(t *testing.T, g *guard.Guard) {
	t.Helper()
	{
		ctx := context.Background()
		home, stranger, away := loginAt("owner", "198.18.0.1"), loginAt("owner", "203.0.113.1"), loginAt("owner", "100.64.0.1")
		settle := func(r guard.Request, d guard.Decision, o guard.Outcome) {
			t.Helper()
			if _, err := g.Settle(ctx, r, d, o); err != nil {
				t.Fatal(err)
			}
		}
		// A stranger's wrong guess before the owner ever logged in: on
		// trust, admitted, and given back when it fails.
		d := allow(t, g, stranger)
		if d.Challenged {
			t.Fatalf("the first network ever: %+v", d)
		}
		settle(stranger, d, guard.Failure)
		d = allow(t, g, home)
		if d.Challenged {
			t.Fatalf("home, after a stranger's failed guess: %+v (the guess was kept)", d)
		}
		settle(home, d, guard.Success)
		for i := range 4 {
			d := allow(t, g, stranger)
			if !d.Challenged || !d.Allowed {
				t.Fatalf("the stranger's try %d: %+v", i, d)
			}
			if i%2 == 0 {
				settle(stranger, d, guard.Failure) // a wrong password
			} else {
				settle(stranger, d, guard.Held) // a right one, never proven
			}
		}
		if d := allow(t, g, home); d.Challenged {
			t.Fatalf("home after the stranger's tries: %+v", d)
		}
		// The owner, away: challenged, held, then proven by the code.
		d = allow(t, g, away)
		if !d.Challenged {
			t.Fatalf("away, the first time: %+v", d)
		}
		settle(away, d, guard.Held)
		receipt := g.HeldReceipt(d)
		if d2 := allow(t, g, away); !d2.Challenged {
			t.Fatalf("away, asked again before the code: %+v", d2)
		}
		if err := g.SettleReceipt(ctx, receipt, guard.Success); err != nil {
			t.Fatal(err)
		}
		for _, r := range []guard.Request{away, home} {
			if d := allow(t, g, r); d.Challenged {
				t.Fatalf("%v after the proof: %+v", r.Subject.IP, d)
			}
		}
		if d := allow(t, g, stranger); !d.Challenged {
			t.Fatalf("the stranger after the owner's proof: %+v", d)
		}
	}
}

// A right password held for its proof (count: held): until it is proven,
// every login of the account is challenged, from wherever it comes (the
// attacker who holds the password cannot try network after network); a
// wrong password counts nothing; the proof clears it.
func TestAHeldLoginChallengesTheAccountUntilProven(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		heldUntilProven(t, newGuard(t, newStore(rdb), heldRules))
	})
}

const heldRules = `
  - {name: stepup, action: login, key: [account], algorithm: distinct, of: ip/16, count: successes, limit: 1,
     remember: 3, window: 720h, mode: challenge, fallback: allow}
  - {name: held, action: login, key: [account], count: held, limit: 1, window: 24h, mode: challenge, fallback: allow}
`

func heldUntilProven(t *testing.T, g *guard.Guard) {
	t.Helper()
	ctx := context.Background()
	home, a, b := loginAt("owner", "198.18.0.1"), loginAt("owner", "203.0.113.1"), loginAt("owner", "100.64.0.1")
	settle := func(r guard.Request, d guard.Decision, o guard.Outcome) {
		t.Helper()
		if _, err := g.Settle(ctx, r, d, o); err != nil {
			t.Fatal(err)
		}
	}
	challengedBy := func(d guard.Decision) string {
		var by []string
		for _, r := range d.Rules {
			if r.Challenged {
				by = append(by, r.Rule)
			}
		}
		return strings.Join(by, ",")
	}
	d := allow(t, g, home)
	settle(home, d, guard.Success)
	// the owner's typos at home count nothing
	for range 3 {
		d = allow(t, g, home)
		settle(home, d, guard.Failure)
	}
	if d = allow(t, g, home); d.Challenged {
		t.Fatalf("home after three typos: challenged by %s", challengedBy(d))
	}
	settle(home, d, guard.Success)
	// the right password from a network the owner never proved: held
	d = allow(t, g, a)
	if challengedBy(d) != "stepup" {
		t.Fatalf("network a: challenged by %q, want stepup", challengedBy(d))
	}
	settle(a, d, guard.Held)
	receipt := g.HeldReceipt(d)
	// now every login of the account is challenged, home included
	for _, r := range []guard.Request{b, home, a} {
		if d := allow(t, g, r); challengedBy(d) != "held" && challengedBy(d) != "stepup,held" {
			t.Fatalf("%v while a login waits for its proof: challenged by %q", r.Subject.IP, challengedBy(d))
		}
	}
	if err := g.SettleReceipt(ctx, receipt, guard.Success); err != nil {
		t.Fatal(err)
	}
	for _, r := range []guard.Request{home, a} {
		d := allow(t, g, r)
		if d.Challenged {
			t.Fatalf("%v after the proof: challenged by %s", r.Subject.IP, challengedBy(d))
		}
		settle(r, d, guard.Success)
	}
}

// A held attempt's right password is no failure of the client's address
// or network: an office behind one address whose users leave their
// step-up codes unanswered is not refused as an address that failed on
// many accounts (it stays a failure of each account's until proven).
func TestHeldLoginsAreNoFailuresOfTheAddress(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), `
  - {name: failed-accounts-per-ip, action: login, key: [ip], algorithm: distinct, of: account, count: failures, limit: 3, window: 1h}
  - {name: per-ip, action: login, key: [ip], count: failures, limit: 3, window: 1h}
  - {name: per-account, action: login, key: [account], count: failures, limit: 1, window: 1h}
`)
		ctx := context.Background()
		for i := range 5 {
			r := loginAt(fmt.Sprintf("user%d", i), "192.0.2.50")
			d := allow(t, g, r)
			if !d.Allowed {
				t.Fatalf("user %d behind the office address: %+v", i, d)
			}
			if _, err := g.Settle(ctx, r, d, guard.Held); err != nil {
				t.Fatal(err)
			}
		}
		// each account keeps its held attempt as a failure until proven
		if d := allow(t, g, loginAt("user0", "192.0.2.51")); d.Allowed || d.DeniedBy != "per-account" {
			t.Fatalf("user0 elsewhere while its attempt is held: %+v", d)
		}
	})
}
