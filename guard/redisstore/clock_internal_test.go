package redisstore

import (
	"context"
	"errors"
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
