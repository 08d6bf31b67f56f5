package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// TestTheTakesPassAnswersAsTheGeneralOne: the library answers a batch
// of one-unit takes on fixed windows without lockout or challenge in a
// pass of its own (fw_takes, straight from the arguments: a rule on its
// own key takes first, a packed one is checked against its hash). The
// same library with that pass cut out, loaded beside it on one real
// redis-server (FUNCTION libraries: their kept tables, OPS, OUT and the
// parsed specs, live from call to call), is given the same random walk
// on keys of its own: batches of one to four such takes on three own
// keys and two hashes (one key may come twice in a batch, under rules of
// other windows; a hash's field under a lower limit too), limits of 0 to
// 3, rules enforcing or not, windows that end now and then (a key
// deleted from both: expiry in real time would end one library's window
// a moment before the other's; the passed time, the same to both, jumps
// past a packed window), and now and then a batch the takes pass must
// leave to the general one (a peek, a take of two units, a take of a
// sliding window, a packed fixed window with a lockout), which leaves
// longer or other replies and ops behind. Every answer must be the same,
// field by field (the end of a window within 50 ms: the two calls are
// apart in time, and an own key's TTL counts in real time). A batch of
// plain takes alone is sent to each library in either shape, drawn for
// each apart: its count and each op's SPEC and DYN 't', or 't' and the
// SPECs alone (args.go). The library packs its replies where the
// server's Lua has struct.pack (redis-server has it): the one with the
// takes pass answers packed (each of its replies must be), the other
// with its packing cut out too, as an array of integers, so every answer
// also holds the packing to the array's integers.
func TestTheTakesPassAnswersAsTheGeneralOne(t *testing.T) {
	const dispatch = "  if fw_takes(keys, args, n, na, out) then return answer(out) end\n"
	const packs = "    if ok and type(st) == 'table' then spack = st.pack end\n"
	if strings.Count(librarySource, dispatch) != 1 || strings.Count(librarySource, packs) != 1 {
		t.Fatalf("the library no longer dispatches to fw_takes with %q, or packs its replies with %q: update this test", dispatch, packs)
	}
	general := strings.Replace(strings.Replace(librarySource, dispatch, "", 1), packs, "", 1)
	rdb := librariesOn(t, map[string]string{"takes": librarySource, "general": general})
	ctx := context.Background()

	specs := make([]string, 7)
	for i := range specs {
		specs[i] = fmt.Sprintf("fw|%d|%d|%d||0|||||", i%4, (60+15*i)*1000000, 1-i/6) // limits 0 to 3; the last one does not enforce
	}
	// the same on keys of their own that hold their window's end too (e0,
	// e1, e2: fe_split; a key is never read in the other form)
	ends := make([]string, len(specs))
	for i := range specs {
		ends[i] = "fe" + strings.TrimPrefix(specs[i], "fw")
	}
	// rules packed in a hash (fields Aa..Ad; the hash's TTL the longest
	// window), on keys of their own (h0, h1); the last one's field is
	// another's, under a lower limit (a limit lowered: a count above it)
	packed := make([]string, 5)
	for i := range packed {
		packed[i] = fmt.Sprintf("fw|%d|%d|%d|A%c|%d|||||", i%4, (50+30*i)*1000000, 1-i/3, 'a'+min(i, 3), 200*1000000)
	}
	packed[4] = strings.Replace(packed[4], "fw|0|", "fw|1|", 1)
	// the time is passed, the same to both libraries, and jumps now and
	// then past a packed window (own keys' windows run in real time: their
	// TTLs)
	now := time.Now().UnixMicro()
	rng := rand.New(rand.NewPCG(7, 11))
	shapes := map[string]int{}
	reply := func(fn, prefix string, ops [][3]string) []int64 {
		args := []any{"fcall", fn + "_batch", len(ops)}
		for _, op := range ops {
			args = append(args, "{t}"+prefix+op[0])
		}
		plain := true
		for _, op := range ops {
			plain = plain && op[2] == "t"
		}
		if plain && rng.IntN(2) == 0 {
			shapes[fn]++
			args = append(args, now, "t")
			for _, op := range ops {
				args = append(args, op[1])
			}
		} else {
			args = append(args, now, len(ops))
			for _, op := range ops {
				args = append(args, op[1], op[2])
			}
		}
		v, err := rdb.Do(ctx, args...).Result()
		if err != nil {
			t.Fatal(fn, err)
		}
		if _, ok := v.(string); ok != (fn == "takes") {
			t.Fatalf("%s answered a %T", fn, v)
		}
		n, err := replyInts(v, 2+replyPerOp*len(ops), nil)
		if err != nil {
			t.Fatal(fn, err)
		}
		return n
	}
	fast := 0
	for step := range 600 {
		n := 1 + rng.IntN(4)
		ops := make([][3]string, n)
		general := rng.IntN(10) == 0 // a batch the takes pass does not answer
		for i := range ops {
			if r := rng.IntN(3); r == 0 {
				ops[i] = [3]string{fmt.Sprint("k", rng.IntN(3)), specs[rng.IntN(len(specs))], "t"}
			} else if r == 1 {
				ops[i] = [3]string{fmt.Sprint("e", rng.IntN(3)), ends[rng.IntN(len(ends))], "t"}
			} else {
				ops[i] = [3]string{fmt.Sprint("h", rng.IntN(2)), packed[rng.IntN(len(packed))], "t"}
			}
		}
		if general {
			if i, r := rng.IntN(n), rng.IntN(4); r == 0 { // a take of a rule that is not a fixed window
				ops[i] = [3]string{fmt.Sprint("s", rng.IntN(3)), "sw|2|60000000|1||0|||||", "t"}
			} else if r == 1 { // a take of a packed fixed window with a lockout (its denial waits for the lockout it would start)
				ops[i] = [3]string{fmt.Sprint("h", rng.IntN(2)), "fw|0|60000000|1|Ae|200000000|10000000 2 3600000000 86400000000||||", "t"}
			} else {
				ops[i][2] = []string{"p", "t|2|0||0"}[rng.IntN(2)]
			}
		} else {
			fast++
		}
		var a, b []int64
		if step%2 == 0 { // in turn first
			a, b = reply("takes", "a", ops), reply("general", "b", ops)
		} else {
			b, a = reply("general", "b", ops), reply("takes", "a", ops)
		}
		if len(a) != len(b) {
			t.Fatalf("step %d %q: %d fields against %d", step, ops, len(a), len(b))
		}
		for i := range a {
			x, y := a[i], b[i]
			tol := int64(0)
			if i >= 2 && ((i-2)%6 == 2 || (i-2)%6 == 3) { // reset, retry: µs, from a TTL in ms
				tol = 50000 // (a busy machine may stall between the two calls)
			}
			if x-y > tol || y-x > tol {
				t.Fatalf("step %d %q: field %d is %d in the takes pass, %d in the general one\n%v\n%v", step, ops, i, x, y, a, b)
			}
		}
		if rng.IntN(6) == 0 { // a window ends (a hash's: all of its windows)
			k := []string{"k0", "k1", "k2", "e0", "e1", "e2", "h0", "h1"}[rng.IntN(8)]
			if err := rdb.Del(ctx, "{t}a"+k, "{t}b"+k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		if now += int64(rng.IntN(3000)); rng.IntN(8) == 0 {
			now += int64(30+rng.IntN(60)) * 1000000
		}
	}
	if fast < 400 {
		t.Fatalf("only %d batches for the takes pass", fast)
	}
	if shapes["takes"] < 200 || shapes["general"] < 200 {
		t.Fatalf("batches sent as plain takes: %v", shapes)
	}
}

// TestMalformedBatchesAreRefused: a batch's arguments come only from the
// store, but the library checks what its kept tables depend on. An op
// count that is not the number of ops given, whole and not negative,
// would cut the kept reply table wrong and answer with an earlier call's
// fields; a window that is not whole µs below 2^53 (infinite, huge,
// empty) would be formatted negative for PEXPIRE, which deletes the key:
// every take admitted; a passed time that is not whole µs in [0, 2^53)
// would answer with no time, or with windows reckoned from nonsense.
// Each is refused, and writes nothing.
func TestMalformedBatchesAreRefused(t *testing.T) {
	rdb := librariesOn(t, map[string]string{"m": librarySource})
	ctx := context.Background()
	const spec = "fw|5|60000000|1||0|||||"
	if v, err := rdb.Do(ctx, "fcall", "m_batch", 2, "{x}a", "{x}b", "", 2, spec, "t", spec, "t").Result(); err != nil {
		t.Fatalf("a good batch: %v", err)
	} else if n, err := replyInts(v, 14, nil); err != nil {
		t.Fatalf("a good batch: %v", err)
	} else if n[0] != 1 {
		t.Fatalf("a good batch: %v, want allowed", n)
	}
	for _, n := range []string{"0.5", "nan", "-1", "1.5", "2", "inf", ""} {
		v, err := rdb.Do(ctx, "fcall", "m_batch", 1, "{y}a", "", n, spec, "t").Result()
		if err == nil || !strings.Contains(err.Error(), "bad op count") {
			t.Errorf("op count %q: %v %v, want refused", n, v, err)
		}
	}
	for _, w := range []string{"inf", "nan", "1e30", "", "-1", "1.5"} {
		v, err := rdb.Do(ctx, "fcall", "m_batch", 1, "{w}k", "", 1, "fw|5|"+w+"|1||0|||||", "t").Result()
		if err == nil || !strings.Contains(err.Error(), "bad spec") {
			t.Errorf("window %q: %v %v, want refused", w, v, err)
		}
	}
	// a fixed window with its end in its value (fe_split) where its
	// value would not be exact (twice the limit not below M: for an
	// hour, 2^30), packed, with a lockout or a challenge, or a window
	// past P's bound: the Go store never sends one (endInValue), the
	// library refuses it
	for _, sp := range []string{"fe|1073741824|3600000000|1||0|||||", "fe|5|3600000000|1|Aa|3600000000|||||",
		"fe|5|3600000000|1||0|1000000 2 60000000 3600000000||||", "fe|5|3600000000|1||0||||1|", "fe|5|40000000000000|1||0|||||"} {
		v, err := rdb.Do(ctx, "fcall", "m_batch", 1, "{w}k", "", 1, sp, "t").Result()
		if err == nil || !strings.Contains(err.Error(), "bad spec") {
			t.Errorf("spec %q: %v %v, want refused", sp, v, err)
		}
	}
	if v, err := rdb.Do(ctx, "fcall", "m_batch", 1, "{u}k", "", 1, "fe|1073741823|3600000000|1||0|||||", "t").Result(); err != nil {
		t.Errorf("an hour's window of 2^30 - 1 with its end in its value: %v %v", v, err)
	}
	for _, tm := range []string{"abc", "nan", "inf", "1e300", "-1000000", "1.5", "9007199254740992"} {
		v, err := rdb.Do(ctx, "fcall", "m_batch", 2, "{v}a", "{v}b", tm, 2, spec, "t", spec, "t").Result()
		if err == nil || !strings.Contains(err.Error(), "bad time") {
			t.Errorf("time %q: %v %v, want refused", tm, v, err)
		}
		v, err = rdb.Do(ctx, "fcall", "m_code_check", 1, "{v}c", tm, "digest", 5).Result()
		if err == nil || !strings.Contains(err.Error(), "bad time") {
			t.Errorf("code check at time %q: %v %v, want refused", tm, v, err)
		}
	}
	if n, err := rdb.Exists(ctx, "{y}a", "{w}k", "{v}a", "{v}b").Result(); err != nil || n != 0 {
		t.Fatalf("refused batches wrote %d keys (%v)", n, err)
	}
}

// librariesOn starts a redis-server with each source of libs loaded as a
// FUNCTION library under its name, and returns a client of it.
func librariesOn(t *testing.T, libs map[string]string) *redis.Client {
	t.Helper()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	for name, src := range libs {
		if err := rdb.FunctionLoadReplace(context.Background(), functionLibrary(name, src)).Err(); err != nil {
			t.Fatal(name, err)
		}
	}
	return rdb
}

// TestABatchOfPlainTakesSendsTheirSpecsAlone: the commonest batch, every
// op a take of one unit for every client, is sent as 't' and each op's
// SPEC (three arguments fewer for three rules); a batch with any other
// op, or a take that is not plain, sends each op's SPEC and DYN after
// the count. On a cluster each group of the batch is sent the same way.
func TestABatchOfPlainTakesSendsTheirSpecsAlone(t *testing.T) {
	a := &store.Spec{ID: "aa", Algorithm: store.FixedWindow, Limit: 3, Window: time.Minute, Enforce: true}
	b := &store.Spec{ID: "bb", Algorithm: store.SlidingWindow, Limit: 5, Window: time.Hour, Enforce: true}
	take := func(sp *store.Spec, tag string) store.Op {
		return store.Op{Kind: store.Take, Spec: sp, Tag: tag, Cost: 1}
	}
	var enc statics
	specA, specB := enc.of(a).spec, enc.of(b).spec
	for _, grouped := range []bool{false, true} {
		s := &Store{grouped: grouped}
		for _, c := range []struct {
			name string
			ops  []store.Op
			want [][]any
		}{
			{"plain takes", []store.Op{take(a, "x"), take(b, "x")}, [][]any{{"t", specA, specB}}},
			{"a peek among them", []store.Op{take(a, "x"), {Kind: store.Peek, Spec: b, Tag: "x", Cost: 1}}, [][]any{{2, specA, "t", specB, "p"}}},
			{"a take of two units", []store.Op{take(a, "x"), {Kind: store.Take, Spec: b, Tag: "x", Cost: 2}}, [][]any{{2, specA, "t", specB, "t|2|0||0"}}},
			{"a take for trusted devices", []store.Op{take(a, "x"), {Kind: store.Take, Cond: store.CondTrusted, Spec: b, Tag: "x", Cost: 1}}, [][]any{{2, specA, "t", specB, "tT"}}},
		} {
			s.statics = statics{}
			var got [][]any
			for _, g := range s.group(c.ops) {
				got = append(got, g.call.argv[4+g.call.nkeys:]) // the arguments after ARGV[1]
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("grouped %v, %s: %v, want %v", grouped, c.name, got, c.want)
			}
		}
		// on a cluster, two subjects: a call each, both plain
		if grouped {
			gs := s.group([]store.Op{take(a, "x"), take(b, "y")})
			if len(gs) != 2 || fmt.Sprint(gs[0].call.argv[5:]) != fmt.Sprint([]any{"t", specA}) || fmt.Sprint(gs[1].call.argv[5:]) != fmt.Sprint([]any{"t", specB}) {
				t.Errorf("two subjects on a cluster: %v", gs)
			}
		}
	}
}

// TestARevocationOutlivesItsWindowInRedissClock: where the time is passed
// (the client's estimate, see clock.go), Redis's own clock expires a
// revocation's key, and the time passed may be behind Redis's: a token
// issued before the revocation, checked at a passed time 200ms short of
// the revocation's end, when Redis's clock is past it, is still revoked.
func TestARevocationOutlivesItsWindowInRedissClock(t *testing.T) {
	rdb := librariesOn(t, map[string]string{"r": librarySource})
	ctx := context.Background()
	var enc statics
	window := time.Second
	spec := enc.of(&store.Spec{ID: "dv", Algorithm: store.Devices, Window: window}).spec
	rv := time.Now()
	if err := rdb.Do(ctx, "fcall", "r_batch", 1, "{r}dv", rv.UnixMicro(), 1, spec, "D").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(rv.Add(window + 300*time.Millisecond))) // Redis's clock past the revocation's end
	at := rv.Add(-100 * time.Millisecond)                         // a token issued before it, alive until at + window
	passed := rv.Add(window - 200*time.Millisecond)               // the time passed, behind Redis's
	r, err := rdb.Do(ctx, "fcall", "r_batch", 1, "{r}dv", passed.UnixMicro(), 1, spec, fmt.Sprintf("d|1|0||%d", at.UnixMicro())).Result()
	if err != nil {
		t.Fatal(err)
	}
	v, err := replyInts(r, 2+replyPerOp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v[2] != 0 {
		t.Errorf("a token issued before the revocation, checked at a passed time behind Redis's: %v, want untrusted", v)
	}
}

// A packed reply's integers are signed 64-bit, big-endian, as
// struct.pack's '>l' writes them: negative ones and ones past 32 bits
// come back as they went.
func TestAPackedReplyReadsSignedIntegers(t *testing.T) {
	want := []int64{-1, 0, 1, 255, 256, 1 << 40, -(1 << 53), 1<<53 - 1, -300}
	b := make([]byte, 0, 8*len(want))
	for _, n := range want {
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	got, err := replyInts(string(b), len(want), nil)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("%v, %v; want %v", got, err, want)
	}
}
