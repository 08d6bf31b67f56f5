package sim

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/localredis"
)

// BenchmarkTheDayOnTheLuaLibrary runs one small day (2,000 users, a tenth
// of the attacks) on memstore, the simulator's store, and on otpguard.lua
// itself in process (the embedded Redis runs it with gopher-lua, on the
// day's virtual clock): what running the Lua library as the in-process
// store would cost the simulator (and a backstop).
// go test -run '^$' -bench TheDayOnTheLuaLibrary -benchtime 1x ./internal/sim
func BenchmarkTheDayOnTheLuaLibrary(b *testing.B) {
	for _, c := range []struct {
		name  string
		store func(clock func() time.Time) store.Store
	}{
		{"memstore", nil},
		{"lua-in-process", func(clock func() time.Time) store.Store {
			srv, err := localredis.Start()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(srv.Close)
			srv.Client().AddHook(clockHook{srv, clock})
			return redisstore.New(srv.Client(), redisstore.Options{})
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				t0 := time.Now()
				r, err := Run(context.Background(), c.name, config.Default(), Options{Seed: 1, Users: 2000, Scale: 0.1, store: c.store})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(time.Since(t0).Milliseconds()), "ms/day")
				b.ReportMetric(float64(r.Requests), "requests/day")
			}
		})
	}
}

// clockHook sets the embedded Redis's clock to the day's before each call.
type clockHook struct {
	srv   *localredis.Server
	clock func() time.Time
}

func (h clockHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h clockHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.srv.SetTime(h.clock())
		return next(ctx, cmd)
	}
}
func (h clockHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.srv.SetTime(h.clock())
		return next(ctx, cmds)
	}
}
