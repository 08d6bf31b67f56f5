package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// coalescedGuard is a guard whose store coalesces its calls through lanes
// batches, on a client of its own (pool size 64, so that lone calls would
// use many connections).
func coalescedGuard(t *testing.T, lanes int, rules string) (*guard.Guard, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	return newGuard(t, redisstore.New(rdb, redisstore.Options{Coalesce: lanes}), rules), rdb
}

// TestCoalescedDecisionsHoldTheLimit: 200 decisions at once on a limit of
// 50, coalesced into batches, admit exactly 50, through at most the lanes'
// connections (a lone call per decision would open up to the pool's 64),
// and the lanes are gone once the calls are answered.
func TestCoalescedDecisionsHoldTheLimit(t *testing.T) {
	g, rdb := coalescedGuard(t, 2, "  - {name: r, action: test, key: [global], limit: 50, window: 1h, onStoreError: deny}\n")
	flush(t, rdb)
	ctx := context.Background()
	if _, err := g.Allow(ctx, request(t, "warm@example.com", "10.9.0.1")); err != nil { // the library loaded, one unit taken
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed, failed := 0, 0
	start := make(chan struct{})
	for i := range 200 {
		wg.Go(func() {
			<-start
			d, err := g.Allow(ctx, request(t, fmt.Sprintf("c%d@example.com", i), "10.9.1.1"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil || d.StoreError != nil {
				failed++
			} else if d.Allowed {
				allowed++
			}
		})
	}
	close(start)
	wg.Wait()
	if failed != 0 || allowed != 49 {
		t.Errorf("200 coalesced decisions on what a limit of 50 left (49): %d allowed, %d failed", allowed, failed)
	}
	if n := rdb.PoolStats().TotalConns; n > 3 {
		t.Errorf("the coalesced calls used %d connections, want at most the 2 lanes' (and one spare)", n)
	}
}

// TestCoalescedCallsMeetAnEmptiedServer: calls batched together when the
// server has lost the library (a restart, a flush) each find it missing,
// and are answered once it is loaded again, counted once each.
func TestCoalescedCallsMeetAnEmptiedServer(t *testing.T) {
	g, rdb := coalescedGuard(t, 1, "  - {name: r, action: test, key: [global], limit: 1000, window: 1h, onStoreError: deny}\n")
	flush(t, rdb)
	ctx := context.Background()
	if _, err := g.Allow(ctx, request(t, "warm@example.com", "10.9.0.1")); err != nil {
		t.Fatal(err)
	}
	admin := adminOf(rdb)
	if err := admin.Do(ctx, "FUNCTION", "FLUSH").Err(); err != nil {
		t.Fatal(err)
	}
	_ = admin.ScriptFlush(ctx).Err()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			d, err := g.Allow(ctx, request(t, fmt.Sprintf("e%d@example.com", i), "10.9.2.1"))
			if err == nil && (d.StoreError != nil || !d.Allowed) {
				err = fmt.Errorf("%+v", d)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a coalesced call after the flush: %v", err)
	}
	st, err := g.Status(ctx, "global", guard.Subject{})
	if err != nil || len(st) != 1 || st[0].Remaining != 1000-41 {
		t.Errorf("after 41 decisions: %+v %v, want %d remaining", st, err, 1000-41)
	}
}

// TestCoalescedCallsFailTogetherWithoutHanging: batches on a server that
// has gone (after the library was loaded, so the calls reach the batches)
// fail each of their calls as a store error within the store's timeout;
// none waits for ever.
func TestCoalescedCallsFailTogetherWithoutHanging(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	cfg, err := config.Parse([]byte("store: {timeout: 1s, denyCache: {ttl: 0s}}\nrules:\n  - {name: r, action: test, key: [global], limit: 500, window: 1h, onStoreError: deny}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), redisstore.New(rdb, redisstore.Options{Coalesce: 2}), guard.Options{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, err := g.Allow(ctx, request(t, "warm@example.com", "10.9.3.1")); err != nil || !d.Allowed {
		t.Fatalf("warm-up: %+v %v", d, err)
	}
	srv.Stop()
	var wg sync.WaitGroup
	failed := make(chan bool, 30)
	start := time.Now()
	for i := range 30 {
		wg.Go(func() {
			d, err := g.Allow(ctx, request(t, fmt.Sprintf("f%d@example.com", i), "10.9.3.1"))
			failed <- err == nil && d.StoreError != nil && !d.Allowed
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("coalesced calls on a server that is gone still wait after 20s")
	}
	close(failed)
	for ok := range failed {
		if !ok {
			t.Error("a call on a server that is gone was not denied as a store error")
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("30 calls with a store timeout of 1s took %v", took)
	}
}

// TestConnBatch: commands sent together through a Conn's Batch, by many
// callers at once, are each answered as a pipeline would answer them, in
// their order (a GET after the SET of its key finds it; the first error
// returned, redis.Nil included), through the lanes'
// connections when the Conn coalesces and as one pipeline when it does
// not; a caller whose context has ended gets its error.
func TestConnBatch(t *testing.T) {
	for _, lanes := range []int{0, 2} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 64})
			defer rdb.Close()
			flush(t, rdb)
			conn := redisstore.Connect(rdb)
			redisstore.New(conn, redisstore.Options{Coalesce: lanes})
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make(chan error, 100)
			for i := range 100 {
				wg.Go(func() {
					p := rdb.Pipeline()
					key := fmt.Sprintf("test:batch%d", i)
					now, set, get := p.Time(ctx), p.Set(ctx, key, i, time.Minute), p.Get(ctx, key)
					p.Discard()
					if err := conn.Batch(ctx, now, set, get); err != nil {
						errs <- err
						return
					}
					if v, _ := get.Int(); now.Val().IsZero() || set.Val() != "OK" || v != i {
						errs <- fmt.Errorf("%d: time %v, set %q, get %d", i, now.Val(), set.Val(), v)
					}
					p = rdb.Pipeline()
					incr, missing := p.Incr(ctx, "test:batch-n"), p.Get(ctx, "test:batch-missing")
					p.Discard()
					if err := conn.Batch(ctx, incr, missing); err != redis.Nil || missing.Err() != redis.Nil || incr.Err() != nil {
						errs <- fmt.Errorf("a missing key: %v, want redis.Nil", err)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			defer rdb.Del(ctx, "test:batch-n")
			if n, err := rdb.Get(ctx, "test:batch-n").Int(); err != nil || n != 100 {
				t.Errorf("test:batch-n = %d %v, want 100", n, err)
			}
			if n := rdb.PoolStats().TotalConns; lanes > 0 && n > uint32(lanes)+1 {
				t.Errorf("the batches used %d connections, want at most the %d lanes' (and one spare)", n, lanes)
			}
			gone, cancel := context.WithCancel(ctx)
			cancel()
			p := rdb.Pipeline()
			now := p.Time(gone)
			p.Discard()
			if err := conn.Batch(gone, now); err == nil {
				t.Error("a batch with an ended context answered no error")
			}
		})
	}
}

// TestACallGivenUpInTheQueueIsNeverSent: with its one lane busy (a
// script that runs 400 ms), a call whose context ends while it waits in
// the queue returns its context's error then, before the busy batch is
// answered, and is never sent: the lane that takes the queue next skips
// it, and a call queued after it is answered.
func TestACallGivenUpInTheQueueIsNeverSent(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	flush(t, rdb)
	conn := redisstore.Connect(rdb)
	redisstore.New(conn, redisstore.Options{Coalesce: 1})
	ctx := context.Background()
	busy := rdb.Pipeline()
	slow := busy.Eval(ctx, `local t0 = redis.call('TIME')
repeat local t = redis.call('TIME') until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 400000
return 1`, nil)
	busy.Discard()
	slowDone := make(chan time.Time, 1)
	go func() {
		if err := conn.Batch(ctx, slow); err != nil {
			t.Error(err)
		}
		slowDone <- time.Now()
	}()
	time.Sleep(50 * time.Millisecond) // the lane is in the slow batch
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	p := rdb.Pipeline()
	incr := p.Incr(short, "test:given-up")
	p.Discard()
	err := conn.Batch(short, incr)
	returned := time.Now()
	if err != context.DeadlineExceeded {
		t.Errorf("the call given up: %v, want its context's error", err)
	}
	// a call queued after it, while the lane is still busy: taken with
	// the next batch, which the call given up would end at once (a batch
	// is bounded by its earliest deadline)
	p = rdb.Pipeline()
	later := p.Incr(ctx, "test:queued-after")
	p.Discard()
	if err := conn.Batch(ctx, later); err != nil || later.Val() != 1 {
		t.Errorf("the call queued after: %d, %v", later.Val(), err)
	}
	if ended := <-slowDone; !returned.Before(ended) {
		t.Errorf("the call given up returned %v after the busy batch was answered, not at its deadline", returned.Sub(ended))
	}
	time.Sleep(100 * time.Millisecond) // a lane has taken the queue since
	if n, err := rdb.Exists(ctx, "test:given-up").Result(); err != nil || n != 0 {
		t.Errorf("the call given up was sent (%d, %v)", n, err)
	}
}
