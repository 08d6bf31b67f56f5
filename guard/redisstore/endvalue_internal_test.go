package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/store"
)

// A fixed window that keeps its end in its key's value (fe_split) is read
// from the value only when that end lies within the window from the
// call's time. Calls whose times are apart (the time passed by clients
// whose estimates of the server's differ, by up to a second) read the
// key's TTL instead: a call half a second behind the one that started
// the window is told the window ends within the window, not half a second
// past it; a call half a second past the value's end, while Redis still
// holds the key, counts on in the same window, never in a new one. In the
// fast pass (plain takes alone) and the general one (a take on its own).
func TestAFixedWindowsEndInItsValueHoldsForCallsWhoseClocksDiffer(t *testing.T) {
	rdb := librariesOn(t, map[string]string{"m": librarySource})
	ctx := context.Background()
	const spec = "fe|3|60000000|1||0|||||" // 3 a minute
	for _, general := range []bool{false, true} {
		key := "{s}plain"
		if general {
			key = "{s}general"
		}
		take := func(at int64) []int64 {
			t.Helper()
			if general {
				return oneOp(t, rdb, key, at, spec, "t|1|0||0")
			}
			return oneOp(t, rdb, key, at, spec, "")
		}
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		t0 := tm.UnixMicro()
		if r := take(t0); r[0] != 1 || r[3] != 2 || r[4] != 60000000 {
			t.Fatalf("general %v: the first take: %v", general, r)
		}
		// half a second behind: the value's end is more than a window on
		if r := take(t0 - 500000); r[0] != 1 || r[3] != 1 || r[4] <= 0 || r[4] > 60000000 {
			t.Fatalf("general %v: a take half a second behind: %v; want 1 left, the window ending within a minute", general, r)
		}
		// six seconds behind, a peek: the end 66 s on, within P (2^17 ms)
		// of the window but not within the window: the key's TTL, about
		// a minute (with P the least power of two above the window and a
		// second, 2^16, it wrapped: 0.46 s)
		if general {
			if r := oneOp(t, rdb, key, t0-6000000, spec, "p|1|0||0"); r[4] < 55000000 || r[4] > 60000000 {
				t.Fatalf("a peek six seconds behind: %v; want the window's reset, about a minute", r)
			}
		}
		// half a second past the value's end, the key still held (its
		// TTL runs in the server's time: a second or so has passed)
		late := t0 + 60500000
		if r := take(late); r[0] != 1 || r[3] != 0 || r[4] <= 0 || r[4] > 60000000 {
			t.Fatalf("general %v: a take past the value's end, the key held: %v; want the window's last unit", general, r)
		}
		if r := take(late); r[0] != 0 || r[5] <= 0 || r[5] > 60000000 {
			t.Fatalf("general %v: a fourth take: %v; want denied, the window held", general, r)
		}
		if p := rdb.PTTL(ctx, key).Val(); p < 50*time.Second {
			t.Fatalf("general %v: the key's TTL is %s, want the window's (the test's premise)", general, p)
		}
	}
}

// A denial's retry-after is the window's end as Redis's TTL has it, not
// as the value holds it: the value's end is reckoned from the clock of
// the call that started the window, a client's estimate of the
// server's where the client passes the time. A window started by a call
// 0.9 s behind, then denied to a call on time, is denied for the key's
// whole TTL (about 2 s), not for 1.1 s after which a retry would be
// denied again. A take, a take of more than the limit, and a peek, in
// the fast pass and the general one.
func TestADenialsRetryAfterIsTheKeysTTL(t *testing.T) {
	rdb := librariesOn(t, map[string]string{"m": librarySource})
	ctx := context.Background()
	const spec = "fe|1|2000000|1||0|||||" // 1 in 2 s
	for i, dyn := range []string{"", "t|1|0||0", "t|5|0||0", "p|1|0||0"} {
		key := "{r}k" + strconv.Itoa(i)
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		t0 := tm.UnixMicro()
		if r := oneOp(t, rdb, key, t0-900000, spec, ""); r[0] != 1 { // started 0.9 s behind
			t.Fatalf("the first take: %v", r)
		}
		r := oneOp(t, rdb, key, t0, spec, dyn)
		if p := rdb.PTTL(ctx, key).Val(); r[2] != 0 || r[5] < p.Microseconds()-50000 || r[5] > 2000000 {
			t.Fatalf("%q on time: %v (retry %d µs); want denied for the key's TTL, %s", dyn, r, r[5], p)
		}
	}
}

// A denial whose key has no time left (its last millisecond, where PTTL
// answers 0, or no TTL at all) is a window over, as a read has it: the
// take starts the next window, however far ahead the end its value holds
// (a client whose passed time is behind the one that started it). Read
// from the value, it was denied for the clocks' difference once more.
func TestADenialInTheKeysLastMomentStartsTheNextWindow(t *testing.T) {
	rdb := librariesOn(t, map[string]string{"m": librarySource})
	ctx := context.Background()
	const spec = "fe|1|300000|1||0|||||" // 1 in 300 ms: P = 2^16, M = 2^37
	for i, dyn := range []string{"", "t|1|0||0", "p|1|0||0"} {
		key := "{z}k" + strconv.Itoa(i)
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		now := tm.UnixMicro()
		end := now/1000 + 20 // 20 ms ahead, held in the value; the key without a TTL
		if err := rdb.Set(ctx, key, 1+(int64(1)<<37)*(end%(1<<16)), 0).Err(); err != nil {
			t.Fatal(err)
		}
		if r := oneOp(t, rdb, key, now, spec, dyn); r[0] != 1 || r[3] != 0 && dyn != "p|1|0||0" {
			t.Fatalf("%q: %v; want the next window's take", dyn, r)
		}
		if dyn == "" || dyn == "t|1|0||0" {
			if p := rdb.PTTL(ctx, key).Val(); p <= 0 {
				t.Fatalf("%q: the key's TTL is %s, want the new window's", dyn, p)
			}
		}
	}
}

// oneOp calls library m's batch of one op on key at the time at (µs):
// a plain take of spec (dyn ""), else spec with its op's arguments dyn.
// It returns the reply's integers: batch allowed, now, then the op's
// allowed, remaining, reset, retry, locked, taken.
func oneOp(t *testing.T, rdb *redis.Client, key string, at int64, spec, dyn string) []int64 {
	t.Helper()
	args := []any{"fcall", "m_batch", 1, key, at, "t", spec}
	if dyn != "" {
		args = []any{"fcall", "m_batch", 1, key, at, 1, spec, dyn}
	}
	v, err := rdb.Do(context.Background(), args...).Result()
	if err != nil {
		t.Fatal(err)
	}
	n, err := replyInts(v, 2+replyPerOp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// endInValue admits a limit while twice it is below M, and no limit past
// that however large (a store.Spec built in code may hold any int64: a
// doubled one wrapped negative and was admitted, and the library refused
// every call of the rule).
func TestEndInValueRefusesEveryLimitPastItsBound(t *testing.T) {
	for _, c := range []struct {
		limit int64
		ok    bool
	}{{1<<30 - 1, true}, {1 << 30, false}, {1<<62 + 1, false}, {1<<63 - 1, false}} {
		if _, ok := endInValue(&store.Spec{Algorithm: store.FixedWindow, Limit: c.limit, Window: time.Hour}); ok != c.ok {
			t.Errorf("an hour's window of %d: in the value %v, want %v", c.limit, ok, c.ok)
		}
	}
}
