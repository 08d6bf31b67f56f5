package redisstore

import (
	"context"
	"fmt"
	"time"
)

// Blobs keeps small values under og:{…} keys with a TTL, through the
// library (so the stack's cache user needs no command beyond EVALSHA's):
// the held results of challenged logins (encrypted by the API) and the
// CAPTCHA tokens already redeemed. Each key is one slot.
type Blobs struct {
	conn *Conn
}

// NewBlobs returns the blob store on rdb.
func NewBlobs(rdb Client) *Blobs { return &Blobs{conn: Connect(rdb)} }

// Put stores value under key for ttl.
func (b *Blobs) Put(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	_, err := lib().call(ctx, b.conn, entryBlobPut, []string{key}, []any{value, max(ttl.Milliseconds(), 1)})
	return err
}

// Get returns the value under key, or found false.
func (b *Blobs) Get(ctx context.Context, key string) (value []byte, found bool, err error) {
	v, err := lib().call(ctx, b.conn, entryBlobGet, []string{key}, nil)
	if err != nil {
		return nil, false, err
	}
	a, ok := v.([]any)
	if !ok || len(a) > 1 {
		return nil, false, storeErr(fmt.Errorf("unexpected reply %T", v))
	}
	if len(a) == 0 {
		return nil, false, nil
	}
	s, ok := a[0].(string)
	if !ok {
		return nil, false, storeErr(fmt.Errorf("unexpected reply element %T", a[0]))
	}
	return []byte(s), true, nil
}

// Delete removes key; deleted reports that this call removed it (of
// callers racing for one key, one wins).
func (b *Blobs) Delete(ctx context.Context, key string) (deleted bool, err error) {
	v, err := lib().call(ctx, b.conn, entryBlobDel, []string{key}, nil)
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	return n == 1, nil
}

// Once marks key for ttl and reports whether it was not marked yet.
func (b *Blobs) Once(ctx context.Context, key string, ttl time.Duration) (first bool, err error) {
	v, err := lib().call(ctx, b.conn, entryBlobOnce, []string{key}, []any{max(ttl.Milliseconds(), 1)})
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	return n == 1, nil
}
