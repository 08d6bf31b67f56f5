package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// A fixed window on its own key (no lockout, no challenge, a limit that
// fits: endInValue) keeps its window's end in its value beside the
// count: once its window has started, a take is one INCRBY, where
// reading the end took a PTTL too, and the value holds the count and the
// end's millisecond. A limit too large for the value keeps the count
// alone, and the PTTL. A take of more than the limit is denied without
// touching the value, whatever its size (an INCRBY of it could carry into
// the end).
func TestAFixedWindowOnItsOwnKeyTakesInOneCommand(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rdb := srv.Client()
	st := newStore(rdb)
	ctx := context.Background()
	tags := []string{"Kz9cY0qQ3xWfT1mB7nLp2A", "Qw8dX1rR4yVgU2nC8oMq3B", "Rx7eW2sS5zUhV3oD9pNr4C"}
	for _, c := range []struct {
		name    string
		limit   int64
		inValue bool
	}{{"a limit that fits", 1000, true}, {"a limit of 2^30 - 1", 1<<30 - 1, true}, {"a limit of 2^30", 1 << 30, false}} {
		var ops []store.Op
		for i, tag := range tags {
			spec := &store.Spec{ID: "a" + strconv.Itoa(i), Algorithm: store.FixedWindow, Limit: c.limit, Window: time.Hour, Enforce: true}
			ops = append(ops, store.Op{Kind: store.Take, Spec: spec, Tag: tag, Cost: 1})
		}
		first, err := st.Do(ctx, ops) // each window starts
		if err != nil || !first[0].Allowed {
			t.Fatalf("%s: the first take: %+v %v", c.name, first, err)
		}
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			res, err := st.Do(ctx, ops)
			if err != nil {
				t.Fatal(err)
			}
			for k, r := range res {
				if !r.Allowed || r.Remaining != c.limit-2-int64(i) || r.ResetAfter <= 0 || r.ResetAfter > time.Hour {
					t.Fatalf("%s: take %d of rule %d: %+v", c.name, i+2, k, r)
				}
			}
		}
		calls := commandCalls(t, rdb)
		pttls := int64(0)
		if !c.inValue {
			pttls = 30
		}
		if calls["incrby"] != 30 || calls["pttl"] != pttls {
			t.Errorf("%s: 10 calls of 3 takes ran %d INCRBY and %d PTTL, want 30 and %d", c.name, calls["incrby"], calls["pttl"], pttls)
		}
		key := ownKey(t, rdb, tags[0], "a0")
		v, err := rdb.Get(ctx, key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if c.inValue {
			// an hour is 3,600,000 ms: P = 2^22 (its key's letter m), M = 2^31
			end := first[0].Now.UnixMicro()/1000 + time.Hour.Milliseconds()
			if !strings.HasSuffix(key, "}a0m") || v%(1<<31) != 11 || v>>31 != end%(1<<22) {
				t.Errorf("%s: %s holds %d (count %d, end %d), want count 11 and end %d mod 2^22", c.name, key, v, v%(1<<31), v>>31, end)
			}
		} else if !strings.HasSuffix(key, "}a0") || v != 11 {
			t.Errorf("%s: %s holds %d, want the count alone, 11", c.name, key, v)
		}
		// more than the limit at once: denied, the value as it was
		for _, cost := range []int64{c.limit + 1, 1 << 40} {
			big := []store.Op{ops[0]}
			big[0].Cost = cost
			res, err := st.Do(ctx, big)
			if err != nil || res[0].Allowed || res[0].Remaining != c.limit-11 || res[0].RetryAfter <= 0 || res[0].RetryAfter > time.Hour {
				t.Errorf("%s: a take of %d: %+v %v; want denied, %d left", c.name, cost, res, err, c.limit-11)
			}
			if after, _ := rdb.Get(ctx, key).Int64(); after != v {
				t.Errorf("%s: a take of %d left %s at %d, was %d", c.name, cost, key, after, v)
			}
		}
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// commandCalls reads INFO commandstats: each command's calls (a script's
// commands included), by lower-case name.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(n, 10, 64)
	}
	return out
}

// A fixed window with a lockout keeps its count alone on its key as
// before (a lockout takes its check and commit apart: nothing to save),
// and its lockout's key is og:{tag}ID:l: both keep their state across an
// upgrade.
func TestAFixedWindowWithALockoutKeepsItsKeys(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rdb := srv.Client()
	st := newStore(rdb)
	ctx := context.Background()
	const tag = "Kz9cY0qQ3xWfT1mB7nLp2A"
	spec := &store.Spec{ID: "lk", Algorithm: store.FixedWindow, Limit: 2, Window: time.Hour, Enforce: true,
		Lockout: &store.Lockout{Initial: time.Minute, Factor: 2, Max: time.Hour, Reset: 24 * time.Hour}}
	for range 2 {
		if res, err := st.Do(ctx, []store.Op{{Kind: store.Take, Spec: spec, Tag: tag, Cost: 1}}); err != nil || !res[0].Allowed {
			t.Fatalf("a take within the limit: %+v %v", res, err)
		}
	}
	if v := rdb.Get(ctx, "og:{"+tag+"}lk").Val(); v != "2" {
		t.Errorf("og:{%s}lk holds %q, want the count alone, 2", tag, v)
	}
	if res, err := st.Do(ctx, []store.Op{{Kind: store.Strike, Spec: spec, Tag: tag, Cost: 1}}); err != nil || !res[0].Locked {
		t.Fatalf("a failure at the limit: %+v %v; want locked", res, err)
	}
	if n := rdb.Exists(ctx, "og:{"+tag+"}lk:l").Val(); n != 1 {
		t.Errorf("the lockout's key og:{%s}lk:l does not exist", tag)
	}
}
