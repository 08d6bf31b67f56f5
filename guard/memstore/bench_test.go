package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/store"
)

// BenchmarkNewSubjectAtAMillionStates: the backstop full at a million
// (rule, subject) states, each operation a subject it has never seen (an
// attacker's spray): the least recently used state is forgotten in
// constant time. The reviewed backstop sorted every state under its lock
// once full (36 ms per new subject at 100,000).
func BenchmarkNewSubjectAtAMillionStates(b *testing.B) {
	const n = 1_000_000
	now := time.Unix(1_900_000_000, 0)
	mem := memstore.NewSized(func() time.Time { return now }, n)
	spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 5, Window: time.Hour, Enforce: true}
	ctx := context.Background()
	ops := []store.Op{{Kind: store.Take, Spec: spec, Cost: 1}}
	for i := range n {
		ops[0].Tag = strconv.Itoa(i)
		_, _ = mem.Do(ctx, ops)
	}
	if mem.Len() != n {
		b.Fatalf("%d states", mem.Len())
	}
	b.ResetTimer()
	for i := range b.N {
		ops[0].Tag = "new" + strconv.Itoa(i)
		_, _ = mem.Do(ctx, ops)
	}
	b.StopTimer()
	if mem.Len() > n {
		b.Fatalf("%d states held, bound %d", mem.Len(), n)
	}
}
