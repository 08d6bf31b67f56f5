package memstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/memstore"
	"github.com/otpguard/otpguard/guard/store"
	"github.com/otpguard/otpguard/internal/oracle"
)

// The backstop against the oracle, a naive model written apart from both
// stores (internal/oracle): random walks biased to reach limits,
// relocks, elastic growth and window edges, every answer compared. The
// Lua library meets the same walks in redisstore's oracle test.
func TestTheBackstopAgreesWithTheOracle(t *testing.T) {
	cov := oracle.Coverage{}
	for seed := range uint64(16) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			clock := oracle.NewClock()
			mem := memstore.New(clock.Now)
			oracle.Walk(t, seed, clock, map[string]store.Store{"memstore": mem}, oracle.Options{Steps: 500}, cov)
		})
	}
	for _, k := range oracle.WantCovered {
		if cov[k] == 0 && !t.Failed() {
			t.Errorf("no walk reached %q: the comparison does not cover it", k)
		}
	}
	t.Logf("reached: %v", cov)
	_ = time.Second
}
