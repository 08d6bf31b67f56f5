package redisstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// coalescer writes the library calls that arrive together as one
// pipeline: for a long-running host whose decisions run concurrently (the
// local server, a backend calling the guard in process), a batch costs
// one write and one read on each side instead of one per call. A Lambda
// container serves one request at a time and gains nothing from it.
//
// Lanes send batches: up to max at once, each taking what is queued when
// it looks. A caller that finds a lane free is that lane: it sends
// batches on its own goroutine until its call is answered, then leaves the
// lane to a goroutine if calls are still queued, which goes when nothing
// is (an idle store keeps no goroutine). A batch waits for no timer: a
// call that arrives alone goes alone, from its caller, as without
// coalescing.
type coalescer struct {
	client *redis.Client
	queue  chan *pendingCmd
	max    int32
	lanes  atomic.Int32
}

// maxBatch bounds a batch (its write and the replies' read).
const maxBatch = 128

type pendingCmd struct {
	ctx   context.Context
	cmd   redis.Cmder
	rest  []redis.Cmder // more commands sent with cmd, after it (processAll)
	done  chan struct{}
	state atomic.Int32 // queued, taken by a lane, or given up by its caller
}

const (
	queued int32 = iota
	taken
	givenUp
)

func newCoalescer(c *redis.Client, lanes int) *coalescer {
	return &coalescer{client: c, queue: make(chan *pendingCmd, 4*maxBatch), max: int32(lanes)}
}

// Process implements caller: cmd goes in the next batch, and Process
// returns once the batch is answered (or has failed: cmd then carries
// the error, as a lone call's would).
func (co *coalescer) Process(ctx context.Context, cmd redis.Cmder) error {
	if !co.await(ctx, &pendingCmd{ctx: ctx, cmd: cmd, done: make(chan struct{})}) {
		return co.client.Process(ctx, cmd) // the queue is full: this one goes on its own
	}
	return cmd.Err()
}

// processAll is Process for cmds that go together: in one batch, in
// their order, on one connection (a pipeline of their own when the
// queue is full). It returns once they are answered (or have failed),
// with the first error among them.
func (co *coalescer) processAll(ctx context.Context, cmds []redis.Cmder) error {
	p := &pendingCmd{ctx: ctx, cmd: cmds[0], done: make(chan struct{})}
	if len(cmds) > 1 {
		p.rest = cmds[1:]
	}
	if !co.await(ctx, p) {
		co.pipeline(ctx, []*pendingCmd{p}) // the queue is full: these go on their own
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// await queues p and returns once its batch has answered it (or failed),
// or its context ended first while it was still queued (a lane then
// skips it; its commands carry the context's error). It reports false,
// queuing nothing, when the queue is full.
func (co *coalescer) await(ctx context.Context, p *pendingCmd) bool {
	select {
	case co.queue <- p:
	default:
		return false
	}
	if co.lanes.Add(1) <= co.max {
		co.serve(p)
	} else {
		co.lanes.Add(-1) // every lane is busy: one of them takes it
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		if p.state.CompareAndSwap(queued, givenUp) {
			p.setErr(ctx.Err()) // never sent: a lane skips it
			return true
		}
		<-p.done // sent: its batch ends by the earliest deadline in it, this one's at the latest
	}
	return true
}

// serve is a caller's turn as a lane: batches until its own call p is
// answered (or is in another lane's batch), then the lane goes on in a
// goroutine while calls are queued.
func (co *coalescer) serve(p *pendingCmd) {
	for !p.answered() && co.next() {
	}
	if len(co.queue) > 0 || co.release() {
		go co.lane()
	}
}

// lane sends batches until the queue is empty.
func (co *coalescer) lane() {
	for {
		for co.next() {
		}
		if !co.release() {
			return
		}
	}
}

// release gives up a lane, unless calls were queued while it was leaving
// and the lane is taken again (true): such a call would otherwise wait
// for nobody.
func (co *coalescer) release() bool {
	co.lanes.Add(-1)
	if len(co.queue) == 0 {
		return false
	}
	if co.lanes.Add(1) > co.max {
		co.lanes.Add(-1) // a lane still counted looks again before it leaves
		return false
	}
	return true
}

func (p *pendingCmd) answered() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// next sends what is queued as one batch; false when nothing is.
func (co *coalescer) next() bool {
	var batch []*pendingCmd
fill:
	for len(batch) < maxBatch {
		select {
		case p := <-co.queue:
			if p.state.CompareAndSwap(queued, taken) {
				batch = append(batch, p)
			}
		default:
			break fill
		}
	}
	switch {
	case len(batch) == 0:
		return len(co.queue) > 0 // only calls given up on were taken: look again
	case len(batch) == 1 && batch[0].rest == nil:
		_ = co.client.Process(batch[0].ctx, batch[0].cmd)
		close(batch[0].done)
	default:
		ctx, cancel := batchContext(batch)
		co.pipeline(ctx, batch)
		cancel()
	}
	return true
}

// pipeline sends batch's commands as one pipeline on ctx, and closes
// their done: each command carries its own error.
func (co *coalescer) pipeline(ctx context.Context, batch []*pendingCmd) {
	pipe := co.client.Pipeline()
	for _, p := range batch {
		_ = pipe.Process(ctx, p.cmd)
		for _, cmd := range p.rest {
			_ = pipe.Process(ctx, cmd)
		}
	}
	_, _ = pipe.Exec(ctx)
	for _, p := range batch {
		close(p.done)
	}
}

func (p *pendingCmd) setErr(err error) {
	p.cmd.SetErr(err)
	for _, cmd := range p.rest {
		cmd.SetErr(err)
	}
}

// batchContext bounds a batch by the earliest of its calls' deadlines, so
// that every call is answered (or has failed) by its own: the guard gives
// each call the same store timeout, so a batch's deadlines are apart by
// no more than the time between their arrivals.
func batchContext(batch []*pendingCmd) (context.Context, context.CancelFunc) {
	var earliest time.Time
	for _, p := range batch {
		if d, ok := p.ctx.Deadline(); ok && (earliest.IsZero() || d.Before(earliest)) {
			earliest = d
		}
	}
	if earliest.IsZero() {
		return context.WithCancel(context.WithoutCancel(batch[0].ctx))
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), earliest)
}

// Batch sends cmds together, in their order on one connection, and
// returns once each is answered (or has failed), with the first error
// among them (redis.Nil included, as a pipeline's Exec): when c
// coalesces (Options.Coalesce), in one of the coalesced batches, beside
// the store's own calls, else as one pipeline (a lone command as it
// is). It is for the other Redis users of a process whose store
// coalesces (the local server's delivery queue), whose commands would
// otherwise cost a round trip each.
func (c *Conn) Batch(ctx context.Context, cmds ...redis.Cmder) error {
	switch {
	case len(cmds) == 0:
		return nil
	case c.co != nil:
		return c.co.processAll(ctx, cmds)
	case len(cmds) == 1:
		return c.Client.Process(ctx, cmds[0])
	}
	pipe := c.Client.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	_, err := pipe.Exec(ctx)
	return err
}
