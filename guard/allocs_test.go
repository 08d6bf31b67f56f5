//go:build !race

// The race detector changes what escapes and what sync.Pool keeps, so
// allocation counts mean something only without it: make test runs with
// -race and leaves this file out; go test ./guard runs it.

package guard_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard"
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
