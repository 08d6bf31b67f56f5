package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// serverClock is the servers' time as seen from this process, for servers
// whose scripts may not call TIME (ElastiCache Serverless refuses it:
// "This Redis command is not allowed from script"). Redis's time stays
// the one clock of every container: the offset of the server's TIME from
// this process's wall clock is measured outside a script, with the round
// trip that measured it, and the library is passed the server's time
// estimated from it. Elsewhere the scripts read TIME themselves and
// nothing here runs.
//
// The error of an estimate is at most half the round trip of its sample
// (TIME was read between the request and the reply), plus the drift of
// this process's clock since the sample: samples are refreshed every
// clockRefresh, and a container's clock, disciplined by NTP, drifts by
// well under maxDrift. The wall clock, not the monotonic one, carries the
// offset across a Lambda container's freezes.
//
// A fresh sample may put the offset lower than the last one did (each is
// right only to half its round trip): a time up to clockHold behind the
// last one passed is passed as 1µs after it instead, so that what one
// process does in order (a revocation, then a login's token issued at its
// decision's time) the library sees in that order. A larger drop is a
// clock's step (the server's, after a failover to a node set behind, or
// this process's own), followed at once: the time is never held there
// (every window and lockout would stand still with it).
type serverClock struct {
	passed     atomic.Bool // scripts here may not read TIME
	refreshing atomic.Bool
	last       atomic.Int64 // the last time passed, µs
	mu         sync.Mutex
	s          clockSample
}

type clockSample struct {
	offset time.Duration // server time minus local wall time
	rtt    time.Duration // round trip of the TIME that measured it
	at     time.Time     // when (local)
}

const (
	clockRefresh = 10 * time.Second
	maxDrift     = 200e-6 // 200 ppm: far above what an NTP-disciplined clock drifts
	clockHold    = 50 * time.Millisecond
)

// pass switches to passing the time in.
func (k *serverClock) pass() { k.passed.Store(true) }

// arg is ARGV[1] of a library call: "" while scripts read TIME
// themselves, else the server's estimated time in µs.
func (k *serverClock) arg(ctx context.Context, c Client) (string, error) {
	if !k.passed.Load() {
		return "", nil
	}
	t, err := k.now(ctx, c)
	if err != nil {
		return "", err
	}
	return formatInt(t.UnixMicro()), nil
}

// now is the server's time, estimated; a stale sample is refreshed by one
// caller while the others go on with it.
func (k *serverClock) now(ctx context.Context, c Client) (time.Time, error) {
	k.mu.Lock()
	s := k.s
	k.mu.Unlock()
	if s.at.IsZero() || time.Since(s.at) > clockRefresh {
		mine := k.refreshing.CompareAndSwap(false, true)
		if mine || s.at.IsZero() {
			ns, err := sample(ctx, c)
			if mine {
				k.refreshing.Store(false)
			}
			switch {
			case err == nil:
				k.mu.Lock()
				k.s, s = ns, ns
				k.mu.Unlock()
			case s.at.IsZero():
				return time.Time{}, err
			}
		}
	}
	return k.after(time.Now().Add(s.offset)), nil
}

// after is t, or 1µs after the last time passed when t is not later by
// up to clockHold.
func (k *serverClock) after(t time.Time) time.Time {
	us := t.UnixMicro()
	for {
		prev := k.last.Load()
		v := us
		if us <= prev && prev-us <= clockHold.Microseconds() {
			v = prev + 1
		}
		if k.last.CompareAndSwap(prev, v) {
			if v == us {
				return t
			}
			return time.UnixMicro(v)
		}
	}
}

// bound is the largest error of the current estimate.
func (k *serverClock) bound() time.Duration {
	k.mu.Lock()
	s := k.s
	k.mu.Unlock()
	if s.at.IsZero() {
		return 0
	}
	return s.rtt/2 + time.Duration(float64(time.Since(s.at))*maxDrift)
}

// sample reads TIME twice and keeps the read with the shorter round trip:
// the first may have waited for a connection to be dialed (TCP, TLS,
// AUTH: after a Lambda container thaws, or the pool's idle connections
// closed), which would put its estimate off by half of that, the second
// runs on the connection it left.
func sample(ctx context.Context, c Client) (clockSample, error) {
	first, err := sampleOnce(ctx, c)
	if err != nil {
		return clockSample{}, err
	}
	if second, err := sampleOnce(ctx, c); err == nil && second.rtt < first.rtt {
		return second, nil
	}
	return first, nil
}

func sampleOnce(ctx context.Context, c Client) (clockSample, error) {
	t0 := time.Now()
	server, err := c.Time(ctx).Result()
	t1 := time.Now()
	if err != nil {
		return clockSample{}, err
	}
	rtt := t1.Sub(t0)
	mid := t0.Add(rtt / 2)
	return clockSample{offset: server.Sub(mid.Round(0)), rtt: rtt, at: t1}, nil
}

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }
