package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/config"
	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// TestClusterFailover: a 3+3 cluster under steady load; one master is
// killed and its replica takes over. It prints the store errors during
// the failover (503 for OTP rules), the time to recover, and how many
// admissions went past a limit because the dead master had not yet
// replicated them (asynchronous replication).
func TestClusterFailover(t *testing.T) {
	cl, err := redistest.StartClusterWithReplicas(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	// Wait for every replica's link to its master.
	deadline := time.Now().Add(30 * time.Second)
	var masters []*redistest.Server
	for _, n := range cl.Nodes {
		c := n.Client()
		for {
			info, err := c.Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "role:master") {
				masters = append(masters, n)
				break
			}
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replication did not settle: %v %s", err, info)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
	if len(masters) != 3 {
		t.Fatalf("%d masters", len(masters))
	}
	rdb, err := redisstore.NewClient(strings.Join(cl.Addrs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	const limit = 50
	cfg, err := config.Parse([]byte(fmt.Sprintf(`store: {timeout: 100ms, denyCache: {ttl: 0s}}
rules:
  - {name: per-destination, action: test, key: [destination], limit: %d, window: 1h}
`, limit)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(cfg.Engine(), redisstore.New(rdb, redisstore.Options{}), guard.Options{Secret: []byte("failover-secret-0123456789"), Backstop: memstore.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	const subjects = 1000 // most below their limit when the master dies
	reqs := make([]guard.Request, subjects)
	admitted := make([]atomic.Int64, subjects)
	for i := range reqs {
		reqs[i] = request(t, fmt.Sprintf("f%d@example.com", i))
	}
	var errs, decisions atomic.Int64
	var lastErr, firstErr atomic.Int64 // unix ns
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; ; i += 8 {
				select {
				case <-stop:
					return
				default:
				}
				k := i % subjects
				d, err := g.Allow(ctx, reqs[k])
				decisions.Add(1)
				switch {
				case err != nil || d.StoreError != nil:
					now := time.Now().UnixNano()
					errs.Add(1)
					lastErr.Store(now)
					firstErr.CompareAndSwap(0, now)
				case d.Allowed:
					admitted[k].Add(1)
				}
				time.Sleep(time.Millisecond) // steady, not saturating
			}
		})
	}
	time.Sleep(time.Second)
	killed := time.Now()
	masters[0].Stop()
	// Recovered: no store error for 2s.
	for {
		time.Sleep(100 * time.Millisecond)
		le := lastErr.Load()
		if le != 0 && time.Since(time.Unix(0, le)) > 2*time.Second {
			break
		}
		if time.Since(killed) > 30*time.Second {
			close(stop)
			wg.Wait()
			c := masters[1].Client()
			nodes, _ := c.ClusterNodes(ctx).Result()
			c.Close()
			t.Fatalf("no recovery 30s after the kill: %d store errors; the cluster:\n%s", errs.Load(), nodes)
		}
	}
	close(stop)
	wg.Wait()
	recovered := time.Unix(0, lastErr.Load()).Sub(killed)
	// Every subject to its limit: the total per subject.
	var fill sync.WaitGroup
	for w := range 8 {
		fill.Go(func() {
			for k := w; k < subjects; k += 8 {
				for range 3 * limit {
					d, err := g.Allow(ctx, reqs[k])
					if err != nil || d.StoreError != nil {
						t.Errorf("after recovery: %v %v", err, d.StoreError)
						return
					}
					if !d.Allowed {
						break
					}
					admitted[k].Add(1)
				}
			}
		})
	}
	fill.Wait()
	over, worst, hit := 0, 0, 0
	for k := range reqs {
		if n := int(admitted[k].Load()) - limit; n > 0 {
			over += n
			worst = max(worst, n)
			hit++
		}
	}
	t.Logf("\nfailover of 1 of 3 masters (node timeout 2s), %d decisions at ~8 in flight, store.timeout 100ms:\n"+
		"  store errors (503 for OTP rules)  %d\n  time to recover                  %s (kill to last error)\n"+
		"  admitted past the limit          %d in all, %d subjects, at most %d for one (limit %d)",
		decisions.Load(), errs.Load(), recovered.Round(100*time.Millisecond), over, hit, worst, limit)
	if errs.Load() == 0 {
		t.Error("killing a master caused no store error: the test did not fail a master over")
	}
	// Bound: a subject can regain at most what its dead master had not
	// replicated, never more than one window's limit.
	if worst > limit {
		t.Errorf("a subject was admitted %d past its limit", worst)
	}
}
