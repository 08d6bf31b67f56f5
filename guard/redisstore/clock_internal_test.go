package redisstore

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// TestAStaleClockSampleIsMeasuredAgain: the server's time passed to the
// library comes from a sample at most clockRefresh old; an older one is
// measured again before it is used, a fresher one kept. (A sample made
// an hour wrong shows which was used.)
func TestAStaleClockSampleIsMeasuredAgain(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rdb := srv.Client()
	ctx := context.Background()
	server := func() time.Time {
		t.Helper()
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, c := range []struct {
		age   time.Duration
		fresh bool
	}{{clockRefresh + time.Second, false}, {clockRefresh - time.Second, true}} {
		var k serverClock
		k.s = clockSample{offset: time.Hour, at: time.Now().Add(-c.age)}
		got, err := k.now(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		want := server()
		if c.fresh {
			want = want.Add(time.Hour)
		}
		if d := got.Sub(want).Abs(); d > 5*time.Second {
			t.Errorf("a sample %s old: the server's time is %s, want about %s (kept: %v)", c.age, got, want, c.fresh)
		}
	}
}

// TestAClustersSlotMapIsReadAgainAtMostEvery200ms: a node that does not
// answer makes a cluster client read the slot map again, once however
// many calls fail together, and again after 200ms.
func TestAClustersSlotMapIsReadAgainAtMostEvery200ms(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1})
	t.Cleanup(func() { _ = cc.Close() })
	c := Connect(cc)
	down := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	c.noteFailure(down)
	first := c.reloaded.Load()
	if first == 0 {
		t.Fatal("a node that did not answer: no reload started")
	}
	for range 10 {
		c.noteFailure(down)
	}
	if c.reloaded.Load() != first {
		t.Error("failures within 200ms of a reload started another")
	}
	c.noteFailure(replyError("ERR not a network error"))
	if c.reloaded.Load() != first {
		t.Error("an answer of the server started a reload")
	}
	time.Sleep(250 * time.Millisecond)
	c.noteFailure(down)
	if c.reloaded.Load() == first {
		t.Error("a failure 250ms after the last reload started none")
	}
}

type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestTheClockBoundIsHalfTheRoundTripAndTheDrift: the error of the time
// passed to the library is at most half the round trip that measured the
// offset (TIME was read somewhere between the request and the reply),
// plus what this process's clock may have drifted since.
func TestTheClockBoundIsHalfTheRoundTripAndTheDrift(t *testing.T) {
	var k serverClock
	if b := k.bound(); b != 0 {
		t.Errorf("no sample: a bound of %s, want 0", b)
	}
	k.s = clockSample{rtt: 10 * time.Millisecond, at: time.Now().Add(-100 * time.Second)}
	// 5ms, and 100s at 200 ppm: 20ms
	if b := k.bound(); b < 25*time.Millisecond || b > 26*time.Millisecond {
		t.Errorf("a 10ms round trip 100s ago: a bound of %s, want 25ms", b)
	}
}

// TestTheSlotMapReaderDoesNotRetry: a node that hangs up costs one
// connection per read of the slot map, not a retry's second (a decision
// waits while a cluster's map is read after a failure).
func TestTheSlotMapReaderDoesNotRetry(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	m := &masters{seeds: []string{ln.Addr().String()}, opt: &redis.ClusterOptions{DialTimeout: time.Second}}
	t.Cleanup(func() {
		for _, c := range m.conns {
			_ = c.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.slots(ctx); err == nil {
		t.Fatal("a node that hangs up: a slot map read")
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("one read of the slot map from a node that hangs up: %d connections, want 1", n)
	}
}

// TestThePassedTimeIsHeldThroughALowerSample: a fresh sample may put the
// offset lower than the one before (each is only right to half its round
// trip); up to clockHold behind, the time one process passes to the
// library is held after the last one passed, never back, never the same:
// a revocation passed one time and a login's decision at the next are in
// that order. Further behind, it is a clock's step, and the time is the
// server's at once (held, every window and lockout would stand still).
func TestThePassedTimeIsHeldThroughALowerSample(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rdb := srv.Client()
	ctx := context.Background()
	var k serverClock
	// the last time passed 40ms ahead of the server's; the sample stale:
	// the next call measures the true one
	k.s = clockSample{offset: time.Hour, at: time.Now().Add(-time.Minute)}
	k.last.Store(time.Now().Add(40 * time.Millisecond).UnixMicro())
	before := time.UnixMicro(k.last.Load())
	var prev time.Time
	for i := range 100 {
		got, err := k.now(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		// (in µs, as the library is passed it)
		if got.UnixMicro() <= before.UnixMicro() || (i > 0 && got.UnixMicro() <= prev.UnixMicro()) {
			t.Fatalf("call %d: %s, after %s and the last call's %s", i, got, before, prev)
		}
		prev = got
	}
	// an hour ahead: a step, the server's time at once
	k.last.Store(time.Now().Add(time.Hour).UnixMicro())
	got, err := k.now(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(got).Abs(); d > 5*time.Second {
		t.Errorf("after a time passed an hour ahead: %s, %s from now", got, d)
	}
	// and on from there, calls within one microsecond too: each after
	// the last
	for i := range 1000 {
		next, err := k.now(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		if next.UnixMicro() <= got.UnixMicro() {
			t.Fatalf("call %d after the step: %s, after %s", i, next, got)
		}
		got = next
	}
}

// slowFirstTime is a client whose first TIME waits on its way to the
// server (a connection being dialed), its TIME read at the end of it.
type slowFirstTime struct {
	Client
	calls atomic.Int64
	wait  time.Duration
}

func (c *slowFirstTime) Time(ctx context.Context) *redis.TimeCmd {
	if c.calls.Add(1) == 1 {
		time.Sleep(c.wait)
	}
	return c.Client.Time(ctx)
}

// TestAClockSampleIsNotTakenOverADial: the first TIME of a sample waits
// 200ms before it reaches the server (a dial): taken alone, its estimate
// is off by 100ms and its bound 100ms; the sample reads TIME again and
// keeps the read with the shorter round trip.
func TestAClockSampleIsNotTakenOverADial(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c := &slowFirstTime{Client: srv.Client(), wait: 200 * time.Millisecond}
	s, err := sample(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	// the server's clock is this machine's: the true offset is 0
	if s.rtt > 50*time.Millisecond || s.offset.Abs() > 50*time.Millisecond {
		t.Errorf("a sample whose first TIME waited 200ms: offset %s, round trip %s", s.offset, s.rtt)
	}
	if n := c.calls.Load(); n != 2 {
		t.Errorf("%d TIME reads, want 2", n)
	}
}
