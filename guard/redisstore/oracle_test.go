package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/oracle"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// The Lua library on a real redis-server, the backstop and the oracle (a
// naive model written apart from both, internal/oracle) walk the same
// random steps; every answer is compared with the oracle's. A mistake
// made identically in Lua and memstore passes their differential test
// (TestSameResultsAsTheRedisLibrary); it fails here.
func TestTheLibraryAgreesWithTheOracle(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cov := oracle.Coverage{}
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			clock := oracle.NewClock()
			admin := srv.Client()
			defer admin.Close()
			if err := admin.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			rdb := srv.Client()
			defer rdb.Close()
			rdb.AddHook(&walkTime{t: t, admin: admin, now: clock.Now, exp: map[string]int64{}})
			stores := map[string]store.Store{
				"lua":      redisstore.New(rdb, redisstore.Options{}),
				"memstore": memstore.New(clock.Now),
			}
			oracle.Walk(t, seed, clock, stores, oracle.Options{Steps: 500, Slack: map[string]time.Duration{"lua": oracle.Grid}}, cov)
		})
	}
	for _, k := range oracle.WantCovered {
		if cov[k] == 0 && !t.Failed() {
			t.Errorf("no walk reached %q: the comparison does not cover it", k)
		}
	}
}

// walkTime runs the library on a redis-server at the walk's time: each
// call gets the walk's clock as its time (ARGV[1], as the store passes
// it where scripts may not read TIME), and runs in one transaction with
// the keys' TTLs as the walk's clock has them. Between calls no key
// expires in real time (PERSIST): the harness keeps each key's expiry on
// the walk's clock, read back from the PTTLs the call left (rounded up to
// the walk's grid: every TTL the library sets is a multiple of it, and
// redis-server's own clock runs a little within the transaction).
type walkTime struct {
	t     testing.TB
	admin *redis.Client
	now   func() time.Time
	exp   map[string]int64 // key -> expiry on the walk's clock (µs)
}

func (h *walkTime) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *walkTime) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// readBack lists every key with its PTTL, and keeps it from expiring.
const readBack = `local out = {}
for _, k in ipairs(redis.call('KEYS', '*')) do
  out[#out + 1] = k
  out[#out + 1] = redis.call('PTTL', k)
  redis.call('PERSIST', k)
end
return out`

func (h *walkTime) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		name := strings.ToLower(fmt.Sprint(args[0]))
		if name != "fcall" && name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		now := h.now().UnixMicro()
		nkeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
		args[3+nkeys] = strconv.FormatInt(now, 10) // ARGV[1]: the time
		tx := h.admin.TxPipeline()
		for k, e := range h.exp {
			if e <= now {
				tx.Del(ctx, k)
			} else {
				tx.PExpire(ctx, k, time.Duration(e-now)*time.Microsecond)
			}
		}
		_ = tx.Process(ctx, cmd)
		ttls := tx.Eval(ctx, readBack, nil)
		began := time.Now()
		if _, err := tx.Exec(ctx); err != nil && cmd.Err() == nil {
			h.t.Errorf("walk time transaction: %v", err)
			return err
		}
		list, err := ttls.Slice()
		if err != nil {
			h.t.Errorf("read back the TTLs: %v", err)
			return err
		}
		grid := oracle.Grid.Milliseconds()
		// Redis 7.0 reads its clock for each command of a transaction: a
		// server descheduled within it (a loaded machine: 2026-11-29, one
		// key 54ms off in make test beside a stress run) moves the TTLs
		// read back off the grid. The grid is checked when the
		// transaction took less than half a step.
		prompt := time.Since(began) < oracle.Grid/2
		h.exp = map[string]int64{}
		for i := 0; i+1 < len(list); i += 2 {
			k, ms := list[i].(string), list[i+1].(int64)
			if ms < 0 {
				h.t.Errorf("key %q has no TTL after a library call", k)
				continue
			}
			up := int64(math.Ceil(float64(ms)/float64(grid))) * grid
			if up-ms > grid/2 && prompt {
				h.t.Errorf("key %q: a TTL of %dms, off the walk's grid of %dms", k, ms, grid)
			}
			h.exp[k] = now + up*1000
		}
		return cmd.Err()
	}
}
