package store

import (
	"sync/atomic"
	"time"
)

// Clock is the store's time as this process last learnt it (every
// [OpResult] carries it), advanced by the process's clock since: the
// in-process backstop counts in it, so that its windows and lockouts
// agree with the store's however the container's clock is set, and a
// device token issued with no time is issued at it. The zero Clock is the
// process's time until it observes the store's.
//
// An answer read late puts the estimate behind by as long as it waited
// (concurrent calls answered out of order too): Now is never at or before
// the latest time observed, so that what the store did before (a
// revocation this process asked for) is before what this process does
// next (a token it issues).
type Clock struct {
	offset atomic.Int64 // store time minus process time, ns
	latest atomic.Int64 // the latest store time observed, Unix ns
}

// Now is the store's time, estimated.
func (c *Clock) Now() time.Time {
	t := time.Now().Add(time.Duration(c.offset.Load()))
	if l := c.latest.Load(); l != 0 && t.UnixNano() <= l {
		return time.Unix(0, l+int64(time.Microsecond)) // (the store counts in µs)
	}
	return t
}

// Observe notes a time the store answered; the zero time is ignored.
func (c *Clock) Observe(t time.Time) {
	if t.IsZero() {
		return
	}
	c.offset.Store(int64(time.Until(t)))
	n := t.UnixNano()
	for {
		l := c.latest.Load()
		if n <= l || c.latest.CompareAndSwap(l, n) {
			return
		}
	}
}
