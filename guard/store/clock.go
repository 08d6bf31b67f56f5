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
// process's time until it observes the store's. An answer read late puts
// it behind by as long as it waited, and it follows the store's clock
// when that steps back (see Guard.DeviceToken for the revocations this
// process made).
type Clock struct {
	offset atomic.Int64 // store time minus process time, ns
}

// Now is the store's time, estimated.
func (c *Clock) Now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// Observe notes a time the store answered; the zero time is ignored.
func (c *Clock) Observe(t time.Time) {
	if !t.IsZero() {
		c.offset.Store(int64(time.Until(t)))
	}
}
