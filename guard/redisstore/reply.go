package redisstore

import (
	"fmt"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// The reply: {batch allowed, now, then per op: allowed (2: skipped),
// remaining, reset after (µs), retry after (µs), locked, taken}, packed
// into one string where the server's Lua has struct.pack (replyInts).
const replyPerOp = 6

// parseReply reads a batch's reply v into res, op j's at res[idx[j]],
// and reports whether the batch allowed; a reply the library would not
// write is an error.
func parseReply(v any, idx []int, res []store.OpResult) (bool, error) {
	var ints [2 + replyPerOp*8]int64
	n, err := replyInts(v, 2+replyPerOp*len(idx), ints[:0])
	if err != nil {
		return false, err
	}
	// the codes and flags in their ranges, the time after 1970: a string
	// or array of the right length from something else than the library
	// (a proxy's, another version's) is refused, not read as a decision
	if n[0] < 0 || n[0] > 1 || n[1] <= 0 {
		return false, fmt.Errorf("unexpected reply: allowed %d, time %d", n[0], n[1])
	}
	for j := range idx {
		if f := n[2+replyPerOp*j:]; f[0] < 0 || f[0] > 4 || f[4] < 0 || f[4] > 1 {
			return false, fmt.Errorf("unexpected reply: op %d answered %d, locked %d", j, f[0], f[4])
		}
	}
	now := time.UnixMicro(n[1])
	us := func(x int64) time.Duration { return time.Duration(x) * time.Microsecond }
	for j, i := range idx {
		f := n[2+replyPerOp*j:]
		res[i] = store.OpResult{
			Allowed: f[0] != 0 && f[0] != 4, Skipped: f[0] == 2, Inapplicable: f[0] == 3, Challenged: f[0] == 4, Remaining: f[1], ResetAfter: us(f[2]), RetryAfter: us(f[3]),
			Locked: f[4] == 1, Taken: f[5], Now: now,
		}
	}
	return n[0] == 1, nil
}

// replyInts appends to n the want integers of a batch's reply v: one
// string of 8-byte big-endian signed integers (the library packs them
// where the server's Lua has struct.pack), or an array of integers.
// Anything else is an error.
func replyInts(v any, want int, n []int64) ([]int64, error) {
	switch a := v.(type) {
	case string:
		if len(a) != 8*want {
			return nil, fmt.Errorf("unexpected reply of %d bytes for %d integers", len(a), want)
		}
		for i := 0; i+8 <= len(a); i += 8 {
			// (one load: the compiler joins the eight bytes)
			u := uint64(a[i])<<56 | uint64(a[i+1])<<48 | uint64(a[i+2])<<40 | uint64(a[i+3])<<32 |
				uint64(a[i+4])<<24 | uint64(a[i+5])<<16 | uint64(a[i+6])<<8 | uint64(a[i+7])
			n = append(n, int64(u))
		}
		return n, nil
	case []any:
		if len(a) != want {
			return nil, fmt.Errorf("unexpected reply of length %d for %d integers", len(a), want)
		}
		for _, x := range a {
			i, ok := x.(int64)
			if !ok {
				return nil, fmt.Errorf("unexpected reply element %T", x)
			}
			n = append(n, i)
		}
		return n, nil
	}
	return nil, fmt.Errorf("unexpected reply %T", v)
}
