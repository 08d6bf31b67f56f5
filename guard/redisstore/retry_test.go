package redisstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/localredis"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// libHook counts the library's calls (FCALL, EVALSHA, EVAL) and its
// loads, answers the calls with answer when set (a reply that says the
// call did not run), and holds each FUNCTION LOAD for hold.
type libHook struct {
	answer      string
	hold        time.Duration
	calls, load atomic.Int64
	evals       atomic.Int64 // of the calls, those sent by source
}

// replyErr is an error reply of the server (go-redis's redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

func (h *libHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *libHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "fcall", "evalsha", "eval":
			h.calls.Add(1)
			if h.answer != "" {
				err := replyErr(h.answer)
				cmd.SetErr(err)
				return err
			}
		case "function", "script":
			if len(cmd.Args()) > 1 && cmd.Args()[1] == "load" {
				h.load.Add(1)
				time.Sleep(h.hold)
			}
		}
		if cmd.Name() == "eval" {
			h.evals.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *libHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

var retrySpec = &store.Spec{ID: "rt", Algorithm: store.FixedWindow, Limit: 1000, Window: time.Minute, Enforce: true}

func retryOp() []store.Op {
	return []store.Op{{Kind: store.Take, Spec: retrySpec, Tag: "AAAAAAAAAAAAAAAAAAAAAA", Cost: 1}}
}

// loaded returns a client of a redis-server of its own and a store that
// has loaded the library there.
func loaded(t *testing.T) (*redis.Client, *redisstore.Store) {
	t.Helper()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rdb := srv.Client()
	st := redisstore.New(rdb, redisstore.Options{})
	if err := st.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rdb, st
}

// TestCallersMeetingAnEmptyServerLoadTheLibraryOnce: when a server that
// had the library restarts empty, the callers that meet it together wait
// for one load, not one each (a thousand containers' requests sending the
// library over a pool too small for them all timed out on two cores).
func TestCallersMeetingAnEmptyServerLoadTheLibraryOnce(t *testing.T) {
	rdb, st := loaded(t)
	ctx := context.Background()
	if !st.Functions() {
		t.Fatal("the test's redis-server runs no functions: nothing here would be tested")
	}
	if err := rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	h := &libHook{hold: 200 * time.Millisecond}
	rdb.AddHook(h)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := st.Do(ctx, retryOp()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := h.load.Load(); n != 1 {
		t.Errorf("20 callers on an emptied server: FUNCTION LOAD %d times, want once", n)
	}
	// and once it is back, the calls go on as functions, not by source
	if n := h.evals.Load(); n != 0 {
		t.Errorf("20 callers on a reloaded server: %d sent by EVAL, want none", n)
	}
}

// TestAScriptMissingOnANodeIsSentBySource: where the library runs as
// scripts (no functions), a node that lost them (a restart, SCRIPT FLUSH)
// is sent the script itself by EVAL, which also caches it there: one
// round trip, not the whole library loaded script by script first.
func TestAScriptMissingOnANodeIsSentBySource(t *testing.T) {
	srv, err := localredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rdb := srv.Client()
	ctx := context.Background()
	st := redisstore.New(rdb, redisstore.Options{})
	if err := st.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if st.Functions() {
		t.Fatal("the embedded redis runs functions: this test needs scripts")
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	h := &libHook{}
	rdb.AddHook(h)
	if _, err := st.Do(ctx, retryOp()); err != nil {
		t.Fatal(err)
	}
	if l, e, c := h.load.Load(), h.evals.Load(), h.calls.Load(); l != 0 || e != 1 || c != 2 {
		t.Errorf("a flushed node: %d script loads, %d calls of which %d by EVAL; want none, 2 and 1 (EVALSHA, then EVAL)", l, c, e)
	}
	// and cached there by it: the next call runs at once
	h.calls.Store(0)
	if _, err := st.Do(ctx, retryOp()); err != nil || h.calls.Load() != 1 {
		t.Errorf("the next call: %v, sent %d times, want once", err, h.calls.Load())
	}
}

// TestACallThatNeverRunsIsSentFourTimesAtMost: a call the server keeps
// answering as not run (the code missing, the time not passed) is sent
// again, the library loaded, then by source, and after the fourth answer
// fails as a store error instead of looping.
func TestACallThatNeverRunsIsSentFourTimesAtMost(t *testing.T) {
	for _, answer := range []string{"NOSCRIPT No matching script", "ERR Function not found", "OTPGUARD_NOCLOCK pass the time"} {
		t.Run(answer, func(t *testing.T) {
			rdb, st := loaded(t)
			h := &libHook{answer: answer}
			rdb.AddHook(h)
			_, err := st.Do(context.Background(), retryOp())
			if !errors.Is(err, store.ErrStoreUnavailable) {
				t.Errorf("a call never run: %v, want a store error", err)
			}
			if n := h.calls.Load(); n != 4 {
				t.Errorf("a call never run was sent %d times, want 4", n)
			}
		})
	}
}

// TestAClusterNodeMustNameAHost: a node of a cluster's address list that
// is not a host:port or a URL with a host is refused, not read as the
// default localhost.
func TestAClusterNodeMustNameAHost(t *testing.T) {
	for _, addrs := range []string{"127.0.0.1:7000,redis://", "127.0.0.1:7000,redis://%zz:1", "redis://:pw@,127.0.0.1:7001"} {
		if c, err := redisstore.NewClient(addrs); err == nil {
			_ = c.Close()
			t.Errorf("%q: a client, want an error", addrs)
		}
	}
}

// replyHook answers the library's calls with reply instead of the
// server's (the call still runs), when armed.
type replyHook struct {
	armed atomic.Bool
	reply any
}

func (h *replyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// (the store's calls are its own type around a *redis.Cmd)
		if c, ok := cmd.(interface{ SetVal(any) }); ok && h.armed.Load() && err == nil {
			switch cmd.Name() {
			case "fcall", "evalsha", "eval":
				c.SetVal(h.reply)
			}
		}
		return err
	}
}

func (h *replyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hooked is a client of a new redis-server whose library calls h answers
// when armed.
func hooked(t *testing.T) (*redis.Client, *replyHook) {
	t.Helper()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rdb := srv.Client()
	h := &replyHook{}
	rdb.AddHook(h)
	return rdb, h
}

// answering runs f with the library's calls answered by reply.
func (h *replyHook) answering(reply any, f func()) {
	h.reply = reply
	h.armed.Store(true)
	defer h.armed.Store(false)
	f()
}

// TestACodeCheckReplyOfAnotherShapeIsAStoreError: a reply to a code check
// that is not the library's (an outcome out of range, a field of another
// type: another version's library, a proxy's answer) is a store error,
// not a verdict.
func TestACodeCheckReplyOfAnotherShapeIsAStoreError(t *testing.T) {
	rdb, h := hooked(t)
	ctx := context.Background()
	codes := redisstore.NewCodes(rdb)
	if _, err := codes.Put(ctx, "og:{t}c", "digest", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMicro()
	for _, reply := range [][]any{
		{int64(5), now, ""}, {int64(0), now, ""}, {"1", now, ""}, {int64(1), "now", ""}, {int64(1), now, int64(7)},
	} {
		var v otp.Verdict
		var err error
		h.answering(reply, func() { v, err = codes.Check(ctx, "og:{t}c", "digest", 5) })
		if !errors.Is(err, store.ErrStoreUnavailable) {
			t.Errorf("a reply %v: %+v, %v, want a store error", reply, v, err)
		}
	}
	// the library's own outcomes, first and last, are verdicts
	for _, outcome := range []int64{1, 4} {
		var v otp.Verdict
		var err error
		h.answering([]any{outcome, now, "r"}, func() { v, err = codes.Check(ctx, "og:{t}c", "digest", 5) })
		if err != nil || int64(v.Check) != outcome || v.Receipt != "r" || v.At.UnixMicro() != now {
			t.Errorf("the outcome %d: %+v, %v, want its verdict", outcome, v, err)
		}
	}
}

// TestABatchReplyOfAnotherShapeIsAStoreError: a reply to a decision's
// batch that is not the library's (an element of another type or none, a
// length that does not fit its ops, a code or flag out of its range, no
// time: another version's library, a proxy's answer), as an array or as
// a packed string, is a store error, not a decision, and the library's
// own shapes, the array and the packed string, are read as they say.
func TestABatchReplyOfAnotherShapeIsAStoreError(t *testing.T) {
	rdb, h := hooked(t)
	ctx := context.Background()
	st := redisstore.New(rdb, redisstore.Options{})
	ops := []store.Op{{Kind: store.Take, Spec: retrySpec, Tag: "shape", Cost: 1}}
	if _, err := st.Do(ctx, ops); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMicro()
	// {batch allowed, now, then the op's: allowed, remaining, reset after,
	// retry after, locked, taken}
	for _, reply := range [][]any{
		{int64(1), now, "1", int64(7), int64(5e6), int64(0), int64(0), int64(1)},
		{int64(1), now, int64(1), "7", int64(5e6), int64(0), int64(0), int64(1)},
		{int64(1), now, int64(1), nil, int64(5e6), int64(0), int64(0), int64(1)},
		{int64(1), "now", int64(1), int64(7), int64(5e6), int64(0), int64(0), int64(1)},
		{nil, now, int64(1), int64(7), int64(5e6), int64(0), int64(0), int64(1)},
		{int64(1), now, int64(1), int64(7), int64(5e6), int64(0), int64(0)},
		{int64(1), now, int64(1), int64(7), int64(5e6), int64(0), int64(0), int64(1), int64(0)},
		{int64(1), now},
		{int64(2), now, int64(1), int64(7), int64(5e6), int64(0), int64(0), int64(1)},
		{int64(1), int64(0), int64(1), int64(7), int64(5e6), int64(0), int64(0), int64(1)},
		{int64(1), now, int64(5), int64(7), int64(5e6), int64(0), int64(0), int64(1)},
		{int64(1), now, int64(1), int64(7), int64(5e6), int64(0), int64(2), int64(1)},
	} {
		var res []store.OpResult
		var err error
		h.answering(reply, func() { res, err = st.Do(ctx, ops) })
		if !errors.Is(err, store.ErrStoreUnavailable) {
			t.Errorf("a reply %v: %+v, %v, want a store error", reply, res, err)
		}
	}
	// packed (struct.pack's 8-byte big-endian integers): of another
	// length, or of the right length with a code or flag out of its
	// range, or no time (64 bytes of text, say)
	denial := []int64{0, now, 0, 7, 5e6, 3e6, 0, 0}
	with := func(i int, v int64) string { d := slices.Clone(denial); d[i] = v; return packed(d) }
	for _, reply := range []any{packed(denial[:7]), packed(denial)[:63], packed(denial) + "\x00", packed(append(denial, 0)), "", []any{packed(denial)},
		strings.Repeat("A", 64), with(0, 2), with(0, -1), with(1, 0), with(1, -now), with(2, 5), with(2, -1), with(6, 2), with(6, -1)} {
		var res []store.OpResult
		var err error
		h.answering(reply, func() { res, err = st.Do(ctx, ops) })
		if !errors.Is(err, store.ErrStoreUnavailable) {
			t.Errorf("a reply %q: %+v, %v, want a store error", reply, res, err)
		}
	}
	// the library's own shapes: an array of integers (where the server's
	// Lua has no struct.pack) and packed
	for _, reply := range []any{[]any{int64(0), now, int64(0), int64(7), int64(5e6), int64(3e6), int64(0), int64(0)}, packed(denial)} {
		var res []store.OpResult
		var err error
		h.answering(reply, func() { res, err = st.Do(ctx, ops) })
		if err != nil || len(res) != 1 || res[0].Allowed || res[0].Remaining != 7 || res[0].ResetAfter != 5*time.Second || res[0].RetryAfter != 3*time.Second || !res[0].Now.Equal(time.UnixMicro(now)) {
			t.Errorf("the library's own shape %T: %+v, %v, want a denial as it says", reply, res, err)
		}
	}
}

// packed is ns as the library packs a batch's reply (struct.pack's
// '>l…': 8-byte big-endian signed integers).
func packed(ns []int64) string {
	b := make([]byte, 0, 8*len(ns))
	for _, n := range ns {
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return string(b)
}

// A batch whose reply has more integers than the library packs (1,400
// ops: 8,402 integers, past the 8,000 values Lua's unpack passes) is
// answered as an array of them: its takes counted and answered, not
// written and then refused.
func TestABatchTooLongToPackIsAnswered(t *testing.T) {
	rdb := single.Client()
	defer rdb.Close()
	ctx := context.Background()
	st := redisstore.New(rdb, redisstore.Options{})
	ops := make([]store.Op, 1400)
	for i := range ops {
		ops[i] = store.Op{Kind: store.Take, Spec: retrySpec, Tag: fmt.Sprintf("long%018d", i), Cost: 1}
	}
	for round := 1; round <= 2; round++ {
		res, err := st.Do(ctx, ops)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, r := range res {
			if !r.Allowed || r.Taken != 1 || r.Remaining != retrySpec.Limit-int64(round) {
				t.Fatalf("round %d, op %d: %+v", round, i, r)
			}
		}
	}
}
