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
	conn *Conn
}

// NewCodes returns the code store on rdb (single node, cluster or the
// embedded Redis). Each code is one key, so each call stays in one slot.
func NewCodes(rdb Client) *Codes { return &Codes{conn: Connect(rdb)} }

var _ otp.Store = (*Codes)(nil)

// Put implements otp.Store. The puts are counted in key + "v" (the same
// slot).
func (c *Codes) Put(ctx context.Context, key, digest string, ttl time.Duration, receipt string) (int64, error) {
	v, err := lib().call(ctx, c.conn, entryCodePut, []string{key, key + "v"}, []any{digest, ttl.Milliseconds(), receipt})
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok || n < 1 {
		return 0, storeErr(fmt.Errorf("unexpected reply %v", v))
	}
	return n, nil
}

// Check implements otp.Store.
func (c *Codes) Check(ctx context.Context, key, digest string, maxAttempts int) (otp.Verdict, error) {
	v, err := lib().call(ctx, c.conn, entryCodeCheck, []string{key}, []any{digest, maxAttempts})
	if err != nil {
		return otp.Verdict{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 3 {
		return otp.Verdict{}, storeErr(fmt.Errorf("unexpected reply %v", v))
	}
	outcome, ok1 := a[0].(int64)
	now, ok2 := a[1].(int64)
	receipt, ok3 := a[2].(string)
	if !ok1 || !ok2 || !ok3 || outcome < 1 || outcome > 4 {
		return otp.Verdict{}, storeErr(fmt.Errorf("unexpected reply %v", v))
	}
	return otp.Verdict{Check: otp.Check(outcome), At: time.UnixMicro(now), Receipt: receipt}, nil
}
