package guard

import (
	"strconv"
	"sync"
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
		keys[i] = denyKey{id: "rule", tag: tagKeyOf(strconv.Itoa(i))}
		c.put(keys[i], Result{RetryAfter: 30 * time.Second, ResetAfter: 30 * time.Second}, now, 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, _, ok := c.get(keys[i&63], now); !ok {
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
	c.put(denyKey{id: "k"}, Result{RetryAfter: time.Second, ResetAfter: time.Second}, now, 0)
	if n := testing.AllocsPerRun(100, func() {
		if _, _, ok := c.get(denyKey{id: "k"}, now); !ok {
			t.Fatal("miss")
		}
	}); n != 0 {
		t.Fatalf("a cached denial allocates %v times", n)
	}
	if _, _, ok := c.get(denyKey{id: "k"}, now.Add(time.Second)); ok {
		t.Fatal("an ended denial was answered")
	}
	if _, kept := c.m.Load(denyKey{id: "k"}); kept || c.n.Load() != 0 {
		t.Fatalf("an ended denial was kept: %d entries", c.n.Load())
	}
}

// TestTheDenyCacheCountsItsEntries: puts, drops, unblocks and reads of
// ended entries from goroutines at once leave the cache's count equal to
// its entries, and within its size (but for the puts that raced the
// last room made).
func TestTheDenyCacheCountsItsEntries(t *testing.T) {
	const size, workers = 50, 8
	c := newDenyCache(time.Minute, size)
	start := time.Unix(1e9, 0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range 5000 {
				k := denyKey{id: "r", tag: tagKeyOf(strconv.Itoa((i*7 + w) % 200))}
				now := start.Add(time.Duration(i) * time.Millisecond)
				switch i % 5 {
				case 0, 1:
					c.put(k, Result{RetryAfter: time.Duration(i%3+1) * time.Millisecond}, now, c.genOf(k))
				case 2:
					c.get(k, now.Add(time.Second)) // ended: dropped
				case 3:
					c.drop(k)
				case 4:
					if i%50 == 4 {
						c.dropState("r", k.tag)
					}
				}
			}
		})
	}
	wg.Wait()
	n := 0
	c.m.Range(func(any, any) bool { n++; return true })
	if got := c.n.Load(); got != int64(n) {
		t.Errorf("the count says %d entries, the map holds %d", got, n)
	}
	if n > size+workers {
		t.Errorf("%d entries in a cache of %d", n, size)
	}
	c.clear()
	if n := c.n.Load(); n != 0 {
		t.Errorf("%d entries counted after clear", n)
	}
}

// TestAFullDenyCacheMakesRoomInBatches: new denials on a full cache of
// denials that have not ended (a flood of subjects, each denied once)
// scan the cache once every size/16 puts, not on each: a put costs the
// same on a cache of ten thousand entries as on one of ten million. The
// cache stays within its size.
func TestAFullDenyCacheMakesRoomInBatches(t *testing.T) {
	const size = 1600
	c := newDenyCache(time.Minute, size)
	now := time.Unix(1e9, 0)
	for i := range size + 1000 {
		c.put(denyKey{id: "r", tag: tagKeyOf(strconv.Itoa(i))}, Result{RetryAfter: time.Hour}, now, 0)
	}
	if c.scans > 1000/(size/16)+1 {
		t.Errorf("1000 puts on a full cache scanned it %d times", c.scans)
	}
	if n := c.n.Load(); n > size {
		t.Errorf("%d entries in a cache of %d", n, size)
	}
	if _, _, ok := c.get(denyKey{id: "r", tag: tagKeyOf(strconv.Itoa(size + 999))}, now); !ok {
		t.Error("the newest denial was dropped")
	}
}

// TestADropOfAStateStopsTheLearningOfItsDenialsOnly: a denial read before
// a drop of its state is not kept, even when the drop comes between the
// learner's check and its put; a drop of another state (another stripe)
// does not stop it; ForgetAll stops every one and empties the shared
// Rules' slots.
func TestADropOfAStateStopsTheLearningOfItsDenialsOnly(t *testing.T) {
	c := newDenyCache(time.Minute, 100)
	now := time.Unix(1e9, 0)
	res := Result{RetryAfter: time.Hour}
	a := denyKey{id: "r", tag: tagKeyOf("a")}
	b := a
	for i := 0; i < 100 && c.stripe(b.id, b.tag) == c.stripe(a.id, a.tag); i++ {
		b.tag = tagKeyOf("b" + strconv.Itoa(i))
	}
	g0 := c.genOf(a)
	c.drop(a) // after the read, before the put
	c.put(a, res, now, g0)
	if _, _, ok := c.get(a, now); ok {
		t.Error("a denial read before its state's drop was kept")
	}
	g0 = c.genOf(a)
	c.drop(b)
	c.dropState(b.id, b.tag)
	c.put(a, res, now, g0)
	if _, _, ok := c.get(a, now); !ok {
		t.Error("another state's drop stopped the learning of this one")
	}
	c.shared[7].Store(&sharedRules{})
	g0 = c.genOf(b)
	c.clear()
	c.put(b, res, now, g0)
	if _, _, ok := c.get(b, now); ok {
		t.Error("a denial read before a ForgetAll was kept")
	}
	if c.shared[7].Load() != nil {
		t.Error("ForgetAll left the shared Rules")
	}
}
