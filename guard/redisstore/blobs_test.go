package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/otp"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
)

// TestBlobs: a blob is read back as put, an empty one too, and is gone
// once deleted or expired; of two deletes one removes it; Once marks a
// key the first time only. On every backend, the Serverless double as
// the stack's user included (the blobs go through the library).
func TestBlobs(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			rdb := b.client()
			bl := redisstore.NewBlobs(rdb)
			ctx := context.Background()
			key := fmt.Sprintf("og:{blob-%s-%d}:ch", b.name, time.Now().UnixNano())
			if _, found, err := bl.Get(ctx, key); err != nil || found {
				t.Fatalf("before any put: found %v, %v", found, err)
			}
			for _, v := range [][]byte{[]byte("held \x00 result"), {}} {
				if err := bl.Put(ctx, key, v, time.Minute); err != nil {
					t.Fatal(err)
				}
				got, found, err := bl.Get(ctx, key)
				if err != nil || !found || string(got) != string(v) {
					t.Fatalf("put %q, got %q %v %v", v, got, found, err)
				}
			}
			if d, err := bl.Delete(ctx, key); err != nil || !d {
				t.Fatalf("the first delete: %v %v", d, err)
			}
			if d, err := bl.Delete(ctx, key); err != nil || d {
				t.Fatalf("the second delete: %v %v", d, err)
			}
			if _, found, err := bl.Get(ctx, key); err != nil || found {
				t.Fatalf("after the delete: found %v, %v", found, err)
			}
			if err := bl.Put(ctx, key, []byte("brief"), time.Millisecond); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, found, err := bl.Get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if !found {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("a blob put for 1ms still there after 30s")
				}
				time.Sleep(5 * time.Millisecond)
			}
			once := key + "-once"
			for i, want := range []bool{true, false} {
				if first, err := bl.Once(ctx, once, time.Minute); err != nil || first != want {
					t.Errorf("Once, call %d: %v %v, want %v", i+1, first, err, want)
				}
			}
		})
	}
}

// TestADeviceCheckWithNothingDependingOnItIsABatchLikeAnother: a batch
// whose device check no op depends on (every op unconditional) is one
// batch as any other, on a cluster too: the check answers for itself
// (a token issued now, never revoked: trusted) and the take for itself.
func TestADeviceCheckWithNothingDependingOnItIsABatchLikeAnother(t *testing.T) {
	devices := &store.Spec{ID: "dv", Algorithm: store.Devices, Window: time.Hour}
	spec := &store.Spec{ID: "fw", Algorithm: store.FixedWindow, Limit: 3, Window: time.Minute, Enforce: true}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := redisstore.New(b.client(), redisstore.Options{})
			ctx := context.Background()
			tag := func(s string) string { return fmt.Sprintf("%-22.22s", fmt.Sprintf("%s%d", s, time.Now().UnixNano())) }
			res, err := st.Do(ctx, []store.Op{
				{Kind: store.DeviceCheck, Spec: devices, Tag: tag("D"), Cost: 1, At: time.Now().Add(-time.Second)},
				{Kind: store.Take, Spec: spec, Tag: tag("T"), Cost: 1},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !res[0].Allowed || !res[1].Allowed || res[1].Remaining != 2 || res[1].Taken != 1 {
				t.Errorf("the check %+v, the take %+v", res[0], res[1])
			}
		})
	}
}

// TestCodesAnswerEveryOutcome: the code store answers each outcome the
// library has: wrong (an attempt counted), burned (the last attempt),
// missing (nothing pending), approved (once), on every backend, and
// numbers each put of a key above the last, even once the number was
// lost.
func TestCodesAnswerEveryOutcome(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c := redisstore.NewCodes(b.client())
			ctx := context.Background()
			key := fmt.Sprintf("og:{codes-%s-%d}:otp", b.name, time.Now().UnixNano())
			check := func(digest string) otp.Check {
				t.Helper()
				v, err := c.Check(ctx, key, digest, 2)
				if err != nil {
					t.Fatal(err)
				}
				return v.Check
			}
			if got := check("right"); got != otp.Missing {
				t.Errorf("before any code: %v, want missing", got)
			}
			first, err := c.Put(ctx, key, "right", time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []otp.Check{otp.Wrong, otp.Burned, otp.Missing} {
				if got := check("wrong"); got != want {
					t.Errorf("wrong guess %d: %v, want %v", i+1, got, want)
				}
			}
			// the puts of a key are numbered on, past a burned code and
			// an approved one: a message is the newest of its slot by it
			second, err := c.Put(ctx, key, "right", time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []otp.Check{otp.Approved, otp.Missing} {
				if got := check("right"); got != want {
					t.Errorf("the right code, try %d: %v, want %v", i+1, got, want)
				}
			}
			third, err := c.Put(ctx, key, "again", time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			// and a number lost (evicted, a failover) starts again above
			// every one before it: from the time, in µs
			if err := b.client().Del(ctx, key+"v").Err(); err != nil {
				t.Fatal(err)
			}
			fourth, err := c.Put(ctx, key, "again", time.Minute, "")
			if err != nil {
				t.Fatal(err)
			}
			if first < 1 || second <= first || third <= second || fourth <= third {
				t.Errorf("puts numbered %d, %d, %d, %d (the last after its number was lost): want each above the last", first, second, third, fourth)
			}
		})
	}
}
