package localredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/localredis"
)

// TestRealTimeExpiresKeys: with RealTime, a key set for 200ms is gone
// once that time has passed (without it, miniredis keeps it until told
// the time moved); without it, a test's clock is its own.
func TestRealTimeExpiresKeys(t *testing.T) {
	ctx := context.Background()
	for _, real := range []bool{true, false} {
		srv, err := localredis.Start()
		if err != nil {
			t.Fatal(err)
		}
		if real {
			srv.RealTime()
		}
		if err := srv.Client().Set(ctx, "k", "v", 200*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		gone := false
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && !gone; time.Sleep(20 * time.Millisecond) {
			n, err := srv.Client().Exists(ctx, "k").Result()
			if err != nil {
				t.Fatal(err)
			}
			gone = n == 0
		}
		if gone != real {
			t.Errorf("RealTime %v: the key expired: %v", real, gone)
		}
		srv.Close()
	}
}
