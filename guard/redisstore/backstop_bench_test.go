package redisstore_test

import (
	"context"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/localredis"
)

// BenchmarkBackstopCandidates measures what a decision of the default
// login rules costs on the two ways the in-process backstop could run:
// memstore (the algorithms written again in Go) and otpguard.lua itself
// in process (the embedded Redis, miniredis, runs it with gopher-lua).
// go test -run '^$' -bench BackstopCandidates -benchmem ./guard/redisstore
func BenchmarkBackstopCandidates(b *testing.B) {
	cfg := config.Default()
	cfg.Store.Timeout = 10 * time.Second
	cfg.Store.DenyCache.TTL = 0
	req := func(i int) guard.Request {
		return guard.Request{Action: "login", Subject: guard.Subject{Account: "user" + strconv.Itoa(i%1000),
			IP: netip.AddrFrom4([4]byte{198, 51, byte(i % 200), byte(i % 250)})}}
	}
	run := func(b *testing.B, st store.Store) {
		g, err := guard.New(cfg.Engine(), st, guard.Options{Secret: secret, Backstop: memstore.New(nil)})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			r := req(i)
			d, err := g.Allow(ctx, r)
			if err != nil {
				b.Fatal(err)
			}
			if d.Allowed {
				_, _ = g.Settle(ctx, r, d, guard.Success)
			}
		}
	}
	b.Run("memstore", func(b *testing.B) { run(b, memstore.New(nil)) })
	b.Run("lua-in-process", func(b *testing.B) {
		srv, err := localredis.Start()
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		run(b, redisstore.New(srv.Client(), redisstore.Options{}))
	})
}
