package redisstore_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/otpguard/otpguard/guard/redisstore"
	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// TestTheStoresOfOneConnShareWhatTheyLearn: the store, the codes and the
// blobs built on one Conn load the library once between them; a second
// Conn on the same client knows nothing of the first (no state is kept at
// package level) and loads it again.
func TestTheStoresOfOneConnShareWhatTheyLearn(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rdb := srv.Client()
	ctx := context.Background()
	calls := regexp.MustCompile(`cmdstat_function\|load:calls=(\d+)`)
	loads := func() int {
		t.Helper()
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := calls.FindStringSubmatch(info)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	conn := redisstore.Connect(rdb)
	if redisstore.Connect(conn) != conn {
		t.Fatal("Connect on a Conn makes another")
	}
	st := redisstore.New(conn, redisstore.Options{})
	if err := st.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := redisstore.NewCodes(conn).Put(ctx, "og:{t}c", "digest", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	if err := redisstore.NewBlobs(conn).Put(ctx, "og:{t}b", []byte("x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := loads(); n != 1 || !st.Functions() {
		t.Fatalf("one conn: FUNCTION LOAD %d times (functions %v), want once", n, st.Functions())
	}
	other := redisstore.New(redisstore.Connect(rdb), redisstore.Options{})
	if err := other.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	if n := loads(); n != 2 {
		t.Errorf("a second conn: FUNCTION LOAD %d times in all, want 2", n)
	}
}
