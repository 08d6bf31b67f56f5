package guard

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Store keeps the rules' counters and applies a batch of operations
// atomically with respect to each other: every Take in a batch is applied
// only if no Op with Enforce set is denied. The redisstore package is the
// production Store; [MemStore] is the in-process backstop.
type Store interface {
	Do(ctx context.Context, ops []Op) ([]OpResult, error)
}

// ErrStoreUnavailable is wrapped by every error a Store returns when it
// cannot be reached in time.
var ErrStoreUnavailable = errors.New("store unavailable")

// OpKind is what an Op does to its key.
type OpKind string

// The operation kinds.
const (
	// Take checks and, when the whole batch allows, consumes Cost.
	Take OpKind = "take"
	// Peek checks whether Cost more would be allowed; it writes nothing.
	Peek OpKind = "peek"
	// Fail records Cost failures whatever the state, and starts a lockout
	// when the failures reach the limit.
	Fail OpKind = "fail"
	// Clear forgets the counter (not the lockout history).
	Clear OpKind = "clear"
	// Release removes the concurrency lease Member.
	Release OpKind = "release"
	// Refund gives back what a Take at time At consumed; the redisstore
	// uses it when another slot of a Redis Cluster denied the batch.
	Refund OpKind = "refund"
	// Reserve books the next slot of a token bucket even in the future and
	// reports the wait, unless the wait would exceed MaxWait.
	Reserve OpKind = "reserve"
)

// Op is one rule's operation on one key.
type Op struct {
	Kind      OpKind
	Algorithm Algorithm
	// Key is the counter's key; LockKey and StrikeKey (lockout state) are
	// set only for rules with a lockout. All three share one hash tag.
	Key, LockKey, StrikeKey string
	// Limit is the effective limit (for soft rules, including the overage).
	Limit  int64
	Window time.Duration
	// Cost is how many units the Op takes, gives back or records.
	Cost int64
	// Enforce makes a denial of this Op deny the whole batch.
	Enforce bool
	// Lockout, for Fail, is the progressive lockout to start.
	Lockout *Lockout
	// Member names the entries a sliding log or concurrency Take adds, so
	// that Release and Refund can remove them.
	Member string
	// At is the instant of the Take a Refund undoes.
	At time.Time
	// MaxWait bounds a Reserve.
	MaxWait time.Duration
}

// OpResult is the outcome of one Op.
type OpResult struct {
	// Allowed reports whether this Op alone allows (for Fail: whether the
	// subject is still allowed after the failure).
	Allowed bool
	// Remaining is how many more units the rule would admit now.
	Remaining int64
	// ResetAfter is when the rule's state is back to empty.
	ResetAfter time.Duration
	// RetryAfter is, when denied, the wait before Cost would be admitted;
	// for an allowed Reserve, the wait before the reserved slot.
	RetryAfter time.Duration
	// Locked reports that a lockout denies (or, for Fail, has started).
	Locked bool
	// Now is the store's clock when the Op was applied.
	Now time.Time
	// Skipped reports that the Op was not applied because an earlier part
	// of the batch denied (a Redis Cluster decides slot by slot).
	Skipped bool
	// Took reports, for a Take, that its group consumed (the store's
	// bookkeeping for refunds).
	Took bool
}

// HashTag returns the part of key between the first { and the next }, the
// part Redis Cluster hashes; keys with the same tag share a slot.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
