package queue_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/delivery/queue"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// TestTheInProcessQueueAsksTheCodeStoreWhichMessageIsNewest: a message
// whose code the code store numbered (Version and CodeKey, as the API
// sends one) is queued in process with nothing written to Redis, and the
// code store's number decides: of two codes put for one slot, only the
// message of the one kept is delivered, whichever is queued first. On a
// cluster and on the Serverless double too: its claim's keys share the
// code's slot, and the stack's cache user may write them.
func TestTheInProcessQueueAsksTheCodeStoreWhichMessageIsNewest(t *testing.T) {
	each(t, func(t *testing.T, rdb redis.UniversalClient) {
		var batch queue.Batch
		if c, ok := rdb.(coalesced); ok {
			batch = c.batch
		}
		sender := &provider{}
		q, local, err := queue.InProcess(queue.Host{Redis: rdb, Batch: batch, Secret: secret,
			Void: func(context.Context, string) error { t.Error("a message gave its send back"); return nil }}, sender, 1, queue.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer local.Close()
		ctx := context.Background()
		codes := redisstore.NewCodes(rdb)
		to := fmt.Sprint("+4479463", time.Now().UnixNano()%100000)
		key := "og:{" + fmt.Sprint("codekey", time.Now().UnixNano()) + "}:otp"
		put := func(code string) message.Message {
			v, err := codes.Put(ctx, key, "digest of "+code, time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			m := job(to, code)
			m.Version, m.CodeKey = v, key
			return m
		}
		earlier, later := put("111111"), put("222222")
		n := countingHook(rdb)
		for _, m := range []message.Message{later, earlier} {
			if err := q.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if d, _ := local.Depth(ctx); d == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the queue did not drain")
			}
		}
		if sender.count() != 1 || sender.sent[0].Code != "222222" {
			t.Fatalf("delivered %+v, want the kept code's message alone", sender.sent)
		}
		if got := n(); got != 2 {
			t.Fatalf("two messages queued and claimed took %d Redis exchanges, want 2 (their claims)", got)
		}
	})
}

// TestAConsumerReadsACodeKeyedMessage: an SQS consumer of this version
// delivers a sealed message queued under its code's key and number, as
// the in-process queue queues one (a later version may queue SQS's so):
// the code store's number decides which is the newest, and a redelivery
// of the message sent sends nothing.
func TestAConsumerReadsACodeKeyedMessage(t *testing.T) {
	each(t, func(t *testing.T, rdb redis.UniversalClient) {
		r := newRig(t, rdb, queue.Options{})
		ctx := context.Background()
		codes := redisstore.NewCodes(rdb)
		to := fmt.Sprint("+4479464", time.Now().UnixNano()%100000)
		key := "og:{" + fmt.Sprint("sealed", time.Now().UnixNano()) + "}:otp"
		body := func(code string) string {
			v, err := codes.Put(ctx, key, "digest of "+code, time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			m := job(to, code)
			b, err := queue.SealJob(r.q, queue.Job{ID: fmt.Sprint(v), Key: key, Message: m, Expires: time.UnixMicro(v).Add(time.Minute).UnixMilli()})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		earlier, later := body("111111"), body("222222")
		if out, _ := r.d.Deliver(ctx, earlier, 1); out != queue.Superseded {
			t.Fatalf("the earlier code's message: %s, want superseded", out)
		}
		if out, _ := r.d.Deliver(ctx, later, 1); out != queue.Delivered {
			t.Fatalf("the kept code's message: %s", out)
		}
		if out, _ := r.d.Deliver(ctx, later, 2); out != queue.Duplicate {
			t.Fatalf("its redelivery: %s, want a duplicate", out)
		}
		if r.sender.count() != 1 || r.sender.sent[0].Code != "222222" {
			t.Fatalf("sent %+v", r.sender.sent)
		}
	})
}

// countingHook counts rdb's exchanges from now on: a command or a
// pipeline each.
func countingHook(rdb redis.UniversalClient) func() int64 {
	var n atomic.Int64
	rdb.AddHook(redistest.RoundTrips{N: &n})
	return n.Load
}
