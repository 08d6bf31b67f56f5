package guard

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkDenyCacheHit is the attack path: a denial answered from the
// process's cache, by many goroutines at once (run with -cpu 1,32).
func BenchmarkDenyCacheHit(b *testing.B) {
	c := newDenyCache(time.Minute, 1000)
	now := time.Unix(1e9, 0)
	keys := make([]denyKey, 64)
	for i := range keys {
		keys[i] = denyKey{id: "rule", tag: strconv.Itoa(i)}
		c.put(keys[i], Result{RetryAfter: 30 * time.Second, ResetAfter: 30 * time.Second}, now)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := c.get(keys[i&63], now); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})
}

// A cached denial is answered without allocating, and an ended entry is
// dropped on the read that finds it ended.
func TestDenyCacheHitAllocatesNothing(t *testing.T) {
	c := newDenyCache(time.Minute, 10)
	now := time.Unix(1e9, 0)
	c.put(denyKey{id: "k"}, Result{RetryAfter: time.Second, ResetAfter: time.Second}, now)
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := c.get(denyKey{id: "k"}, now); !ok {
			t.Fatal("miss")
		}
	}); n != 0 {
		t.Fatalf("a cached denial allocates %v times", n)
	}
	if _, ok := c.get(denyKey{id: "k"}, now.Add(time.Second)); ok {
		t.Fatal("an ended denial was answered")
	}
	if len(c.m) != 0 {
		t.Fatalf("an ended denial was kept: %d entries", len(c.m))
	}
}
