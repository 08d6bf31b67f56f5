package queue

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/message"
)

// Local is the in-process queue of the local server (DELIVERY_MODE
// queue, the default of `make run`): PushJob hands the job, unsealed (it
// never leaves the process), to a pool of workers that deliver it with a
// Deliverer, a Retry waits its backoff in a timer, and a Dead message is
// counted (the process has no dead-letter queue). What waits is lost when
// the process ends.
type Local struct {
	mu   sync.Mutex
	cond *sync.Cond
	jobs []localJob
	busy int // being delivered or waiting a retry
	// places held by sends whose message is not queued yet (reserve):
	// taken under mu, given back without it (a release is called under
	// mu by put)
	places  atomic.Int64
	dead    int
	closed  bool
	d       *Deliverer
	wg      sync.WaitGroup
	outcome func(Outcome)
}

type localJob struct {
	body    string // sealed (Push), or
	job     *Job   // as it is (PushJob)
	token   string // its claims': it is with one worker at a time
	receive int
	done    chan struct{} // closed after its first attempt, when Push waits for it
}

// idleWait bounds how long Push waits for the first attempt of a message
// queued with nothing ahead of it.
const idleWait = 100 * time.Millisecond

// NewLocal returns an in-process queue; Start sets its workers going.
func NewLocal() *Local {
	l := &Local{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Start delivers with d on workers goroutines until Close; outcome, if
// not nil, is told each attempt's outcome.
func (l *Local) Start(d *Deliverer, workers int, outcome func(Outcome)) {
	l.d, l.outcome = d, outcome
	for range workers {
		l.wg.Add(1)
		go l.work()
	}
}

// Push implements Backend. A message with nothing ahead of it is
// delivered at once: Push waits for that first attempt (up to 100ms), so
// on an idle server the outbox holds the code when the API answers (a
// script reading it right after its curl finds it). Behind a backlog it
// returns at once.
func (l *Local) Push(ctx context.Context, body string) error {
	return l.push(ctx, localJob{body: body, token: newID(), receive: 1})
}

// PushJob implements JobBackend: Push of the job as it is, never sealed
// (it stays in the process).
func (l *Local) PushJob(ctx context.Context, j Job) error {
	return l.push(ctx, localJob{job: &j, token: newID(), receive: 1})
}

var _ JobBackend = (*Local)(nil)

func (l *Local) push(ctx context.Context, j localJob) error {
	l.mu.Lock()
	idle := len(l.jobs) == 0 && l.busy == 0
	l.mu.Unlock()
	if idle {
		j.done = make(chan struct{})
	}
	release, _ := api.RoomChecked(ctx)
	l.put(j, false, release)
	if idle {
		t := time.NewTimer(idleWait)
		defer t.Stop()
		select {
		case <-j.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return nil
}

// put queues j; retry: a message given back to the queue after its
// backoff; release, if not nil, gives back j's place in the same step
// (the depth never counts it twice).
func (l *Local) put(j localJob, retry bool, release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if retry {
		l.busy--
	}
	if release != nil {
		release()
	}
	if l.closed {
		return
	}
	l.jobs = append(l.jobs, j)
	l.cond.Signal()
}

// Depth implements Backend: messages waiting, being delivered or waiting
// a retry, and the places of messages about to be queued (reserve).
func (l *Local) Depth(context.Context) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.jobs)+l.busy) + l.places.Load(), nil
}

// reserve implements reserver: a place in the depth, checked against max
// and taken in one step (a check then a push would let sends at once all
// pass a cap they read together), until its release; its first call
// gives it back, any later one does nothing.
func (l *Local) reserve(max int64) (func(), int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	depth := int64(len(l.jobs)+l.busy) + l.places.Load()
	if depth >= max {
		return nil, depth
	}
	l.places.Add(1)
	var once sync.Once
	return func() { once.Do(func() { l.places.Add(-1) }) }, depth
}

// Dead is how many messages were given up on.
func (l *Local) Dead() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

func (l *Local) work() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		for len(l.jobs) == 0 && !l.closed {
			l.cond.Wait()
		}
		if l.closed {
			l.mu.Unlock()
			return
		}
		j := l.jobs[0]
		l.jobs = l.jobs[1:]
		l.busy++
		l.mu.Unlock()

		var out Outcome
		var wait time.Duration
		if j.job != nil {
			out, wait = l.d.deliver(context.Background(), *j.job, j.receive, j.token)
		} else {
			out, wait = l.d.deliverBody(context.Background(), j.body, j.receive, j.token)
		}
		if l.outcome != nil {
			l.outcome(out)
		}
		if out == Retry {
			time.AfterFunc(wait, func() { l.put(localJob{body: j.body, job: j.job, token: j.token, receive: j.receive + 1}, true, nil) })
		} else {
			l.mu.Lock()
			l.busy--
			if out == Dead {
				l.dead++
			}
			l.mu.Unlock()
		}
		// told after the depth: a caller answered once its message was
		// delivered finds it out of the depth (a next send is not
		// refused as full for a message already gone)
		if j.done != nil {
			close(j.done)
		}
	}
}

// Close stops the workers once their current message is done.
func (l *Local) Close() {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	l.wg.Wait()
}

// InProcess is DeliveryMode queue within one process (the local server):
// the queue of h on a Local whose workers deliver with direct. Close the
// Local when done.
func InProcess(h Host, direct message.Sender, workers int, o Options) (*Queue, *Local, error) {
	local := NewLocal()
	q, err := New(h, local, o)
	if err != nil {
		return nil, nil, err
	}
	d, err := NewDeliverer(DeliverOptions{Redis: h.Redis, Batch: h.Batch, SealKey: guard.DeriveKey(h.Secret, SealLabel),
		Sender: func() message.Sender { return direct }, Void: h.Void, InProcess: true, Log: h.Log})
	if err != nil {
		return nil, nil, err
	}
	local.Start(d, workers, nil)
	return q, local, nil
}
