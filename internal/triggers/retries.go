package triggers

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cognito retries a trigger that has not answered within 5 seconds (three
// tries in all): a custom sender whose first try is slow (a cold start in
// the VPC reading its secrets and config, a TLS handshake to Redis, a
// slow provider) would send the code again, and count it again. Each
// custom sender's event is marked in Redis before it is acted on (before
// its code is even decrypted), under a keyed hash of the pool, the user,
// the trigger source and the encrypted code: Cognito's retry carries the
// same message, and any other event a new one (a resend's new code, and
// even the same code encrypted again: the Encryption SDK draws a fresh
// data key and IV per message). A second event with the same mark within
// retryTTL sends nothing and counts nothing. A try that fails with an error (a provider outage, a store
// error) removes its mark, so that Cognito's next try does the work; a
// try that Lambda ends at its timeout leaves the mark, and the code is
// then not sent at all: at most once, never twice (the user asks for
// another code).
const retryTTL = time.Minute

// retries marks the custom senders' events.
type retries struct {
	rdb redis.UniversalClient
	key []byte // derived from the deployment secret: "cognito retries"
}

func (r *retries) markKey(pool, user, source, encryptedCode string) string {
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte(pool + "\x00" + user + "\x00" + source + "\x00" + encryptedCode))
	return "og:{" + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16]) + "}:rt"
}

// first marks an event and reports whether it was not marked yet; with
// the store failing it reports true (the send is then decided as any
// other: the rules' own store-error policy applies).
func (r *retries) first(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	ok, err := r.rdb.SetNX(ctx, key, "1", retryTTL).Result()
	if err != nil {
		return true, err
	}
	return ok, nil
}

// forget removes an event's mark after a try that failed.
func (r *retries) forget(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisTimeout)
	defer cancel()
	return r.rdb.Del(ctx, key).Err()
}
