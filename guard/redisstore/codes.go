package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/otp"
)

// putCode replaces the pending code of a (destination, purpose): its hash
// and a fresh attempt count, with the code's TTL set in the same step.
var putCode = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'h', ARGV[1], 'n', 0)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// checkCode consumes the pending code when the digest matches, else
// counts the attempt and burns the code at the maximum. One script, so
// parallel checks of the right code approve it once. Reply: {outcome,
// server time in µs} with outcome 1 approved, 2 wrong, 3 burned, 4 missing.
var checkCode = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local h = redis.call('HGET', KEYS[1], 'h')
if not h then return {4, now} end
if h == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return {1, now}
end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
if n >= tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  return {3, now}
end
return {2, now}
`)

// Codes is the otp.Store on Redis: one hash per pending code.
type Codes struct {
	rdb redis.Scripter
}

// NewCodes returns the code store on rdb (single node, cluster or the
// embedded Redis). Each code is one key, so each script stays in one slot.
func NewCodes(rdb redis.Scripter) *Codes { return &Codes{rdb: rdb} }

var _ otp.Store = (*Codes)(nil)

// Put implements otp.Store.
func (c *Codes) Put(ctx context.Context, key, digest string, ttl time.Duration) error {
	if err := putCode.Run(ctx, c.rdb, []string{key}, digest, ttl.Milliseconds()).Err(); err != nil {
		return storeErr(err)
	}
	return nil
}

// Check implements otp.Store.
func (c *Codes) Check(ctx context.Context, key, digest string, maxAttempts int) (otp.Check, time.Time, error) {
	v, err := checkCode.Run(ctx, c.rdb, []string{key}, digest, maxAttempts).Int64Slice()
	if err != nil {
		return 0, time.Time{}, storeErr(err)
	}
	if len(v) != 2 || v[0] < 1 || v[0] > 4 {
		return 0, time.Time{}, storeErr(fmt.Errorf("unexpected reply %v", v))
	}
	return otp.Check(v[0]), time.UnixMicro(v[1]), nil
}
