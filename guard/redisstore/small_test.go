package redisstore_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
)

// slowPipelines delays each pipeline (a cluster's second phase) while
// armed.
type slowPipelines struct {
	armed atomic.Bool
	delay time.Duration
}

func (h *slowPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *slowPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *slowPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() {
			time.Sleep(h.delay)
		}
		return next(ctx, cmds)
	}
}

// TestAClusterRefundNamesEachGroupsOwnTime: on a cluster the groups of a
// decision run in two phases, on nodes with clocks of their own, and a
// window the second phase starts begins after the first phase's time. A
// success's refund names, for each rule, the time its own group answered:
// the reviewed code used the first group's time for all, and a refund for
// a window started more than 2 ms later was ignored.
func TestAClusterRefundNamesEachGroupsOwnTime(t *testing.T) {
	hook := &slowPipelines{delay: 20 * time.Millisecond}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1,
		NewClient: func(opt *redis.Options) *redis.Client {
			c := redis.NewClient(opt)
			c.AddHook(hook)
			return c
		}})
	defer rdb.Close()
	defer flush(t, rdb)
	g := newGuard(t, redisstore.New(rdb, redisstore.Options{}), `
  - {name: first, action: test, key: [destination], count: failures, limit: 3, window: 1h}
  - {name: a, action: test, key: [ip], count: failures, limit: 10, window: 1h}
  - {name: b, action: test, key: [account], count: failures, limit: 10, window: 1h}
  - {name: c, action: test, key: [ip/48], count: failures, limit: 10, window: 1h}
`)
	req := request(t, "refund@example.com", "192.0.2.91")
	warm := request(t, "warm@example.com", "198.51.100.1")
	warm.Subject.Account = "warm"
	allow(t, g, warm) // learn the slots
	hook.armed.Store(true)
	d := allow(t, g, req)
	hook.armed.Store(false)
	if _, err := g.Settle(context.Background(), req, d, guard.Success); err != nil {
		t.Fatal(err)
	}
	d = allow(t, g, req)
	for _, r := range d.Rules {
		if want := r.Limit - 1; r.Remaining != want {
			t.Errorf("%s: %d left after a success and one more attempt, want %d: its refund was ignored", r.Rule, r.Remaining, want)
		}
	}
}

// TestTheBackstopsSlidingWindowDoesNotOverflow: a sliding window of 30
// days holding millions of units: the backstop computes its estimate as
// the Lua library does, in floating point (the reviewed code overflowed
// int64 past about 3.6 million units and disagreed).
func TestTheBackstopsSlidingWindowDoesNotOverflow(t *testing.T) {
	clock, lua := newFixedClock(t)
	mem := memstore.New(func() time.Time { return clock.now })
	spec := &store.Spec{ID: "sw", Algorithm: store.SlidingWindow, Limit: 10_000_000, Window: 30 * 24 * time.Hour, Enforce: true}
	take := func(st store.Store, cost int64) store.OpResult {
		res, err := st.Do(context.Background(), []store.Op{{Kind: store.Take, Spec: spec, Tag: "big", Cost: cost}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	take(lua, 8_000_000)
	take(mem, 8_000_000)
	clock.advance(30*24*time.Hour + time.Hour) // the next window: the previous one weighs
	want, got := take(lua, 1), take(mem, 1)
	want.Now, got.Now = time.Time{}, time.Time{}
	if want != got || got.Remaining < 0 || !got.Allowed {
		t.Fatalf("8M units, then one more a window later:\n lua      %+v\n memstore %+v", want, got)
	}
}

// TestIPv6NetworksAreCountedToo: a client that rotates through the /64s
// of its /56 (five of them here) gets no more failed logins on distinct
// accounts than the /56 rule allows; the reviewed defaults counted per /64
// only and admitted 100 in a minute.
func TestIPv6NetworksAreCountedToo(t *testing.T) {
	rdb := single.Client()
	defer rdb.Close()
	defer flush(t, rdb)
	cfg := config.Default()
	cfg.Store.Timeout = 10 * time.Second // not a test of latency: a busy machine's first load of the library may take longer than 50ms
	g, err := guard.New(cfg.Engine(), redisstore.New(rdb, redisstore.Options{}), guard.Options{Secret: secret, Backstop: memstore.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for i := range 100 {
		ip := netip.MustParseAddr(fmt.Sprintf("2001:db8:1:%x::%x", i%5, i+1)) // five /64s of one /56
		r := guard.Request{Action: "login", Subject: guard.Subject{Account: fmt.Sprintf("acct%d", i), IP: ip}}
		if d := failLogin(t, g, r); d.Allowed {
			admitted++
		}
	}
	if admitted > 40 {
		t.Fatalf("%d failed logins on distinct accounts from one /56 in a minute, want at most 40", admitted)
	}
}
