package triggers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/testonly/redistest"
)

// Receipts of the tests' attempts: the account's rule and the address's,
// as guard.Receipt writes them (name,tag,at,units[,member]).
const (
	accountEntry = "login-per-device,AAAAAAAAAAAAAAAAAAAAAA,1700000000000000,1"
	ownerIP      = "login-per-ip,BBBBBBBBBBBBBBBBBBBBBB,1700000000000000,1 login-failed-accounts-per-ip,BBBBBBBBBBBBBBBBBBBBBB,1700000000000000,1,mmmmmmmmmmm"
	strangerIP   = "login-per-ip,CCCCCCCCCCCCCCCCCCCCCC,1700000000000000,1 login-failed-accounts-per-ip,CCCCCCCCCCCCCCCCCCCCCC,1700000000000000,1,mmmmmmmmmmm"
)

func newSignIns(t *testing.T) (*signIns, *time.Time) {
	t.Helper()
	rs, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	now := time.Unix(1_800_000_000, 0)
	return &signIns{rdb: rdb, key: []byte("a test key of 32 bytes, no more!"), now: func() time.Time { return now }}, &now
}

// TestSignInsSettleWhatTheAttemptTook walks the cases of signins.go's
// comment, each against a real redis-server.
func TestSignInsSettleWhatTheAttemptTook(t *testing.T) {
	ctx := context.Background()
	type step struct {
		keep    string // a PreAuthentication's receipt; "post" for a PostAuthentication
		advance time.Duration
	}
	cases := []struct {
		name  string
		steps []step
		want  []string // what the (last) PostAuthentication settles
	}{
		{"one sign-in", []step{{keep: accountEntry + " " + ownerIP}, {keep: "post"}}, []string{accountEntry + " " + ownerIP}},
		{"a retried PreAuthentication settles both", []step{{keep: accountEntry + " " + ownerIP}, {keep: accountEntry + " " + ownerIP, advance: 5 * time.Second},
			{keep: "post"}}, []string{accountEntry + " " + ownerIP, accountEntry + " " + ownerIP}},
		{"a stranger between the owner's Pre and Post: only what both share", []step{{keep: accountEntry + " " + ownerIP},
			{keep: accountEntry + " " + strangerIP, advance: time.Second}, {keep: "post", advance: time.Second}}, []string{accountEntry}},
		{"a stranger's older failure is left alone", []step{{keep: accountEntry + " " + strangerIP}, {keep: accountEntry + " " + ownerIP, advance: time.Minute},
			{keep: "post"}}, []string{accountEntry + " " + ownerIP}},
		{"an attempt that took nothing is the newest", []step{{keep: accountEntry + " " + strangerIP}, {keep: "", advance: time.Minute},
			{keep: "post"}}, nil},
		{"nothing kept", []step{{keep: "post"}}, nil},
		{"kept too long ago", []step{{keep: accountEntry}, {keep: "post", advance: signInTTL + time.Second}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, now := newSignIns(t)
			var got []string
			for _, st := range c.steps {
				*now = now.Add(st.advance)
				if st.keep == "post" {
					var err error
					if got, err = s.take(ctx, "pool", "ann"); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := s.keep(ctx, "pool", "ann", st.keep); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("settled %q, want %q", got, c.want)
			}
			// a second PostAuthentication finds nothing of what was settled
			again, _ := s.take(ctx, "pool", "ann")
			for _, r := range again {
				if slices.Contains(got, r) && r != "" {
					t.Errorf("settled twice: %q", r)
				}
			}
			for _, k := range s.rdb.Keys(ctx, "*").Val() {
				if strings.Contains(k, "ann") || strings.Contains(k, "pool") {
					t.Errorf("a key names the user or the pool: %s", k)
				}
				if ttl := s.rdb.PTTL(ctx, k).Val(); ttl <= 0 {
					t.Errorf("%s has no TTL", k)
				}
			}
		})
	}
}
