//go:build !race

// Allocation counts mean something only without the race detector (see
// guard/allocs_test.go): make test's step "allocs" runs this file.

package redisstore_test

import (
	"context"
	"testing"
)

// TestAnAllowedDecisionAllocatesLittle: an allowed decision of three
// rules on a single node allocates at most 24 times, go-redis's own
// included (32 before the call's command was built in place, in one
// allocation with its group, and the attempt kept its ops). A change of
// go-redis may move the figure; a change of ours that adds an allocation
// to every decision fails here.
func TestAnAllowedDecisionAllocatesLittle(t *testing.T) {
	rdb := single.Client()
	defer rdb.Close()
	g := guardWith(t, rdb, "{timeout: 2s}", benchRules("1000000000"))
	reqs := benchRequests(t, "allocs", 4, 64)
	ctx := context.Background()
	i := 0
	allow := func() {
		d, err := g.Allow(ctx, reqs[i%len(reqs)])
		if err != nil || !d.Allowed {
			t.Fatal(err, d.DeniedBy)
		}
		i++
	}
	for range len(reqs) {
		allow() // warm: connections, the specs' encodings, the pools
	}
	least := 1e9
	for range 3 {
		least = min(least, testing.AllocsPerRun(100, allow))
	}
	if least > 24 {
		t.Errorf("an allowed decision of three rules allocates %v times, want at most 24", least)
	}
	t.Logf("%v allocations a decision", least)
}
