package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/guard/otp"
)

// Codes is the otp.Store on Redis: one hash per pending code (see the
// code_put and code_check entries of otpguard.lua).
type Codes struct {
	rdb Client
}

// NewCodes returns the code store on rdb (single node, cluster or the
// embedded Redis). Each code is one key, so each call stays in one slot.
func NewCodes(rdb Client) *Codes { return &Codes{rdb: rdb} }

var _ otp.Store = (*Codes)(nil)

// Put implements otp.Store.
func (c *Codes) Put(ctx context.Context, key, digest string, ttl time.Duration) error {
	_, err := lib().call(ctx, c.rdb, entryCodePut, []string{key}, []any{digest, ttl.Milliseconds()})
	return err
}

// Check implements otp.Store.
func (c *Codes) Check(ctx context.Context, key, digest string, maxAttempts int) (otp.Check, time.Time, error) {
	v, err := lib().call(ctx, c.rdb, entryCodeCheck, []string{key}, []any{digest, maxAttempts})
	if err != nil {
		return 0, time.Time{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, time.Time{}, storeErr(fmt.Errorf("unexpected reply %v", v))
	}
	outcome, ok1 := a[0].(int64)
	now, ok2 := a[1].(int64)
	if !ok1 || !ok2 || outcome < 1 || outcome > 4 {
		return 0, time.Time{}, storeErr(fmt.Errorf("unexpected reply %v", v))
	}
	return otp.Check(outcome), time.UnixMicro(now), nil
}
