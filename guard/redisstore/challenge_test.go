package redisstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A rule in mode challenge never denies: past its limit it flags the
// request (Challenged) and counts it; an enforcing rule still denies, and
// then nothing is counted, the challenge rule's units included.
func TestAChallengeRuleFlagsAndCounts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuard(t, newStore(rdb), `
  - {name: stepup, action: login, key: [account], limit: 2, window: 1h, mode: challenge}
  - {name: per-ip, action: login, key: [ip], limit: 5, window: 1h}
`)
		r := loginAt("x", "192.0.2.10")
		for i := range 6 {
			if i == 5 {
				r = loginAt("x", "192.0.2.11") // another address: only stepup counts 6
			}
			d := allow(t, g, r)
			if !d.Allowed {
				t.Fatalf("request %d denied: %+v", i, d)
			}
			if want := i >= 2; d.Challenged != want || (want && d.ChallengedBy != "stepup") {
				t.Fatalf("request %d: challenged %v (%s), want %v", i, d.Challenged, d.ChallengedBy, want)
			}
		}
		st, err := g.Status(context.Background(), "account", r.Subject)
		if err != nil || len(st) != 1 || st[0].Remaining != 0 {
			t.Fatalf("the challenge rule's state: %+v %v", st, err)
		}
		before := dump(t, rdb)
		counted := false
		for _, v := range before {
			counted = counted || v == "6"
		}
		if !counted {
			t.Fatalf("the challenged requests were not counted (no counter at 6): %v", before)
		}
		r = loginAt("x", "192.0.2.10")
		for range 5 {
			if d := allow(t, g, r); d.Allowed || d.DeniedBy != "per-ip" || d.Challenged {
				t.Fatalf("past per-ip: %+v", d)
			}
		}
		if after := dump(t, rdb); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("denied requests were counted:\nbefore %v\nafter  %v", before, after)
		}
	})
}
