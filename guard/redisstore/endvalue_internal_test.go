package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"
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
			args := []any{"fcall", "m_batch", 1, key, at, "t", spec}
			if general {
				args = []any{"fcall", "m_batch", 1, key, at, 1, spec, "t|1|0||0"}
			}
			v, err := rdb.Do(ctx, args...).Result()
			if err != nil {
				t.Fatal(err)
			}
			n, err := replyInts(v, 2+replyPerOp, nil)
			if err != nil {
				t.Fatal(err)
			}
			return n // batch allowed, now, allowed, remaining, reset, retry, locked, taken
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

// When a fixed window's own key (its end in its value) is empty, the
// window in progress at its key before this layout (the same key
// without its letter: a library before this one counted there) goes
// on, with that key's count and end: a deploy does not start every such
// count afresh. A give-back of one of its takes comes off the old key,
// and an unblock clears both. In the fast pass and the general one.
func TestAWindowOfTheKeyBeforeThisLayoutGoesOn(t *testing.T) {
	rdb := librariesOn(t, map[string]string{"m": librarySource})
	ctx := context.Background()
	const spec = "fe|5|3600000000|1||0|||||" // 5 an hour
	call := func(key, dyn string) []int64 {
		t.Helper()
		args := []any{"fcall", "m_batch", 1, key, "", "t", spec}
		if dyn != "" {
			args = []any{"fcall", "m_batch", 1, key, "", 1, spec, dyn}
		}
		v, err := rdb.Do(ctx, args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := replyInts(v, 2+replyPerOp, nil)
		if err != nil {
			t.Fatal(err)
		}
		return n // batch allowed, now, allowed, remaining, reset, retry, locked, taken
	}
	near := func(us, ms int64) bool { return us <= ms*1000 && us > (ms-2000)*1000 }
	for _, general := range []bool{false, true} {
		take := ""
		if general {
			take = "t|1|0||0"
		}
		old, key := "{c}ka", "{c}kam"
		if err := rdb.Set(ctx, old, 3, 30*time.Minute).Err(); err != nil { // 3 taken, 30 minutes left
			t.Fatal(err)
		}
		if r := call(key, take); r[0] != 1 || r[3] != 1 || !near(r[4], 1800000) {
			t.Fatalf("general %v: a take on the old key's window: %v; want 1 left, 30 minutes", general, r)
		}
		if r := call(key, take); r[0] != 1 || r[3] != 0 {
			t.Fatalf("general %v: the window's last: %v", general, r)
		}
		if r := call(key, take); r[0] != 0 || !near(r[5], 1800000) {
			t.Fatalf("general %v: past the limit: %v; want denied for the old window's 30 minutes", general, r)
		}
		if p := rdb.PTTL(ctx, key).Val(); p > 30*time.Minute || p < 29*time.Minute {
			t.Fatalf("general %v: the key's TTL is %s, want the old window's", general, p)
		}
		call(key, "u|1|0||0") // an unblock: both keys cleared
		if n := rdb.Exists(ctx, old, key).Val(); n != 0 {
			t.Fatalf("general %v: an unblock left %d of the keys", general, n)
		}
		if r := call(key, take); r[0] != 1 || r[3] != 4 || r[4] != 3600000000 {
			t.Fatalf("general %v: after the unblock: %v; want a new window", general, r)
		}
		rdb.Del(ctx, key)
	}
	// an old key counting past this limit (a limit lowered): full, never
	// a count that carries into the end
	if err := rdb.Set(ctx, "{e}ka", int64(1)<<40, 10*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if r := call("{e}kam", ""); r[0] != 0 || r[3] != 0 || !near(r[5], 600000) {
			t.Fatalf("take %d on an old key past the limit: %v; want denied for its 10 minutes", i+1, r)
		}
	}
	// a take of nothing on an empty key starts no window
	if r := call("{f}kam", "t|0|0||0"); r[0] != 1 || r[3] != 5 || rdb.Exists(ctx, "{f}kam").Val() != 0 {
		t.Fatalf("a take of nothing: %v, the key %d; want 5 left and no key", r, rdb.Exists(ctx, "{f}kam").Val())
	}
	// a give-back of a take of the old key's window, the new key empty
	old, key := "{d}ka", "{d}kam"
	if err := rdb.Set(ctx, old, 2, 10*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	call(key, "r|1|0||0")
	if v := rdb.Get(ctx, old).Val(); v != "1" || rdb.Exists(ctx, key).Val() != 0 {
		t.Fatalf("a give-back left the old key at %q and the new one %d, want 1 and none", v, rdb.Exists(ctx, key).Val())
	}
	if r := call(key, "p|1|0||0"); r[0] != 1 || r[3] != 4 || !near(r[4], 600000) {
		t.Fatalf("a peek: %v; want 4 left, the old window's 10 minutes", r)
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
		call := func(at int64, dyn string) []int64 {
			t.Helper()
			args := []any{"fcall", "m_batch", 1, key, at, "t", spec}
			if dyn != "" {
				args = []any{"fcall", "m_batch", 1, key, at, 1, spec, dyn}
			}
			v, err := rdb.Do(ctx, args...).Result()
			if err != nil {
				t.Fatal(err)
			}
			n, err := replyInts(v, 2+replyPerOp, nil)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		t0 := tm.UnixMicro()
		if r := call(t0-900000, ""); r[0] != 1 { // started 0.9 s behind
			t.Fatalf("the first take: %v", r)
		}
		r := call(t0, dyn)
		if p := rdb.PTTL(ctx, key).Val(); r[2] != 0 || r[5] < p.Microseconds()-50000 || r[5] > 2000000 {
			t.Fatalf("%q on time: %v (retry %d µs); want denied for the key's TTL, %s", dyn, r, r[5], p)
		}
	}
}
