// Package queue is the delivery queue (DeliveryMode queue): a send the
// rules allowed is put in a queue instead of being handed to the provider
// in the request, and a consumer delivers it at the provider's pace (the
// same pacer and senders as a direct send), so a burst above the
// provider's rate is answered 202 at once and delivered seconds later
// instead of being refused.
//
// What it promises, with SQS's at-least-once delivery and any number of
// consumers:
//
//   - the newest message of a slot (where its code lives: the code store's
//     destination and purpose, a Cognito message's kind) wins: a resend
//     makes every older message of it superseded, never delivered after
//     it (the ledger's latest id, in Redis, asked again once the
//     provider's turn has come; in the in-process queue, the number the
//     code store keeps beside the code: nothing is written to queue a
//     send's message there);
//   - a message is sent once: a consumer claims it in Redis before
//     sending and marks it done after, so a redelivered message sends
//     nothing;
//   - a message whose code has expired (by Redis's clock) is dropped;
//   - a provider failure is retried with backoff; on the last receive the
//     send's units are given back (its receipt settled void) and the
//     message goes to the dead-letter queue; a message that failed and
//     was then superseded or expired gives its units back too; only the
//     holder of a message's claim gives them back, so they go back once;
//   - the queue is bounded: above MaxDepth messages waiting a send is
//     refused (503 with Retry-After), and the rules were applied before
//     anything was queued.
//
// The jobs are sealed (AES-GCM under a key derived from the deployment
// secret): the queue's storage never holds a code or an address in clear.
// Backends: SQS (internal/delivery) and the in-process queue of the local
// server ([Local]).
package queue

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/api"
	"github.com/otpguard/otpguard/guard/message"
	"github.com/otpguard/otpguard/guard/store"
)

// Host is what the senders of a process are built on: the store the
// pacers share, the Redis of the queue's ledger, the deployment secret,
// and the settling of a send's receipt.
type Host struct {
	Store  store.Store
	Redis  redis.UniversalClient
	Secret []byte
	// Batch, if set, sends the ledger's commands (on Redis) in batches of
	// its own: the local server's coalesced pipelines.
	Batch Batch
	// Void settles a send's receipt as a void attempt: its units go back.
	Void func(ctx context.Context, receipt string) error
	Log  *slog.Logger
}

// Job is one queued message, as sealed into the queue.
type Job struct {
	ID      string          `json:"i"`
	Key     string          `json:"k"` // the destination and purpose, hashed: the newest message per key wins
	Message message.Message `json:"m"`
	// Expires is when the code ends, in Unix ms by Redis's clock.
	Expires int64 `json:"e"`
}

// Backend holds the sealed jobs until a consumer delivers them.
type Backend interface {
	Push(ctx context.Context, body string) error
	// Depth is how many messages wait or are being delivered (SQS's
	// figure is approximate and may be a second old).
	Depth(ctx context.Context) (int64, error)
}

// JobBackend is a Backend within the process (the local server's
// Local): it takes the job as it is. Nothing leaves the process, so
// nothing is sealed; sealing and opening a send's email was about a tenth
// of the local server's CPU per send.
type JobBackend interface {
	Backend
	PushJob(ctx context.Context, j Job) error
}

// Options bound and describe a Queue.
type Options struct {
	// MaxDepth: above this many messages waiting, a send is refused with
	// a Retry-After. Default: 6000 (20 SMS a second for 5 minutes).
	MaxDepth int64
	// Rate is the messages a second the providers take, per channel: the
	// ETA a queued send is told. Default 20.
	Rate map[message.Channel]int64
	// TTL is a message's lifetime when it carries none (a Cognito code):
	// default 15 minutes.
	TTL time.Duration
}

// Full is the refusal of a send while the queue is over its depth cap.
type Full struct{ After time.Duration }

func (f *Full) Error() string {
	return fmt.Sprintf("the delivery queue is full; retry in %s", f.After)
}

// Unwrap makes a full queue an unavailable delivery.
func (f *Full) Unwrap() error { return message.ErrUnavailable }

// RetryIn is how long the caller should wait.
func (f *Full) RetryIn() time.Duration { return f.After }

// Queue is the sender of DeliveryMode queue: Send queues the message.
type Queue struct {
	backend  Backend
	ledger   *Ledger
	seal     cipher.AEAD
	keyMAC   []byte
	macs     sync.Pool // HMAC-SHA256 under keyMAC
	opts     Options
	log      *slog.Logger
	depthLog depthLog
	fullLog  depthLog // paces a full queue's line (fail only: see full)
}

// depthLog paces the log lines of an unknown depth: the first failure,
// then once a minute while it lasts; its end is logged, and a failure
// after it is logged at once.
type depthLog struct {
	mu     sync.Mutex
	at     time.Time // when a failure was last logged (this process's clock: it paces a log line, nothing else)
	failed bool
}

// fail reports whether this failure is to be logged.
func (l *depthLog) fail() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed = true
	if time.Since(l.at) >= time.Minute {
		l.at = time.Now()
		return true
	}
	return false
}

// recovered reports whether a failure ended with this read.
func (l *depthLog) recovered() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := l.failed
	l.failed, l.at = false, time.Time{}
	return was
}

// New returns the queue of h on b.
func New(h Host, b Backend, o Options) (*Queue, error) {
	if h.Redis == nil || len(h.Secret) == 0 || b == nil {
		return nil, errors.New("queue: a Redis client, the secret and a backend are required")
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = 6000
	}
	if o.TTL <= 0 {
		o.TTL = 15 * time.Minute
	}
	aead, err := sealer(guard.DeriveKey(h.Secret, SealLabel))
	if err != nil {
		return nil, err
	}
	log := h.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	q := &Queue{backend: b, ledger: NewLedger(h.Redis, h.Batch), seal: aead, keyMAC: guard.DeriveKey(h.Secret, "delivery-queue key"), opts: o, log: log}
	q.macs.New = func() any { return hmac.New(sha256.New, q.keyMAC) }
	return q, nil
}

// Send queues m (implements message.Sender). Errors wrap
// message.ErrUnavailable; a full queue's is a *Full, unless the caller
// asked for room before it stored m's code (api.WithRoomChecked): then m
// is queued in the place Room gave it (in process), or whatever the depth
// now (SQS: the cap is soft), never refused after its code replaced the
// owner's. The place is given back once m is queued, or m is not.
func (q *Queue) Send(ctx context.Context, m message.Message) error {
	release, checked := api.RoomChecked(ctx)
	if !checked {
		var err error
		if release, err = q.Room(ctx, m.Channel); err != nil {
			return err
		}
		ctx = api.WithRoomChecked(ctx, release)
	}
	defer release()
	ttl := m.TTL
	if ttl <= 0 {
		ttl = q.opts.TTL
	}
	// decided and counted: a caller hanging up now does not leave the
	// message half queued (its units given back while SQS holds it)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var job Job
	if _, inProcess := q.backend.(JobBackend); inProcess && m.Version > 0 && m.CodeKey != "" {
		// the code store's number says which message of the slot is the
		// newest (see codeKeyed): no ledger entry to write
		job = Job{ID: strconv.FormatInt(m.Version, 10), Key: m.CodeKey, Message: m,
			Expires: time.UnixMicro(m.Version).Add(ttl).UnixMilli()}
	} else {
		job = Job{ID: newID(), Message: m}
		job.Key = q.key(m, job.ID)
		now, err := q.ledger.Enqueue(ctx, job.Key, job.ID, ttl, m.Version)
		if err != nil {
			return fmt.Errorf("%w: queue: %w", message.ErrUnavailable, err)
		}
		job.Expires = now.Add(ttl).UnixMilli()
	}
	if err := q.push(ctx, job); err != nil {
		return fmt.Errorf("%w: queue: %w", message.ErrUnavailable, err)
	}
	return nil
}

// push hands job to the backend: as it is to a JobBackend, sealed to any
// other.
func (q *Queue) push(ctx context.Context, job Job) error {
	if jb, ok := q.backend.(JobBackend); ok {
		return jb.PushJob(ctx, job)
	}
	body, err := q.sealJob(job)
	if err != nil {
		return err
	}
	return q.backend.Push(ctx, body)
}

// Room is the *Full a message of channel ch is refused with now, or the
// release of the place it holds for the message (implements api.Roomer):
// the API asks before it replaces a code. The in-process queue counts its
// places in its depth until the message is queued or released, so sends
// at once never pass its cap; SQS's depth is a count read, and holds no
// places (see docs/delivery.md, "The cap is soft").
func (q *Queue) Room(ctx context.Context, ch message.Channel) (func(), error) {
	if r, ok := q.backend.(reserver); ok {
		release, depth := r.reserve(q.opts.MaxDepth)
		if release == nil {
			return nil, q.full(ctx, depth, ch)
		}
		return release, nil
	}
	depth, err := q.backend.Depth(ctx)
	switch {
	case err != nil:
		// the cap fails open: a send is not refused for want of a count.
		// Said once a minute while it lasts, not for every send.
		if q.depthLog.fail() {
			q.log.WarnContext(ctx, "the delivery queue's depth is unknown; its cap is not applied (said once a minute while it lasts)", "err", err)
		}
		return noPlace, nil
	case q.depthLog.recovered():
		q.log.InfoContext(ctx, "the delivery queue's depth is known again; its cap applies")
	}
	if depth >= q.opts.MaxDepth {
		return nil, q.full(ctx, depth, ch)
	}
	return noPlace, nil
}

// full is the refusal of a message of ch at depth. It is logged at most
// once a minute, not for each message refused (the API logs none: a
// flood of sends while the queue is full would be a flood of log lines;
// a queue at its cap admits one now and then as it drains, so an
// admission does not restart the pacing); each refusal is in its
// request's decision record (delivery_unavailable).
func (q *Queue) full(ctx context.Context, depth int64, ch message.Channel) error {
	if q.fullLog.fail() {
		q.log.WarnContext(ctx, "the delivery queue is full: messages are refused until it drains (said at most once a minute)",
			"depth", depth, "maxDepth", q.opts.MaxDepth)
	}
	return &Full{After: q.wait(depth-q.opts.MaxDepth+1, ch)}
}

// noPlace is the release of a backend that holds no places.
func noPlace() {}

// reserver is a backend that holds places (Local): reserve gives one when
// its depth, places included, is below max, with its release; else nil
// and the depth.
type reserver interface {
	reserve(max int64) (release func(), depth int64)
}

// Backlog is the estimated wait of the message of channel ch just queued
// behind the others (implements api.Queuer): 0 when none is ahead, or the
// depth is unknown.
func (q *Queue) Backlog(ctx context.Context, ch message.Channel) time.Duration {
	depth, err := q.backend.Depth(ctx)
	if err != nil || depth <= 1 {
		return 0
	}
	return q.wait(depth-1, ch)
}

// wait is how long n messages take at ch's rate, in whole seconds.
func (q *Queue) wait(n int64, ch message.Channel) time.Duration {
	rate := q.opts.Rate[ch]
	if rate <= 0 {
		rate = 20
	}
	return time.Duration(math.Ceil(float64(n)/float64(rate))) * time.Second
}

// key names m's slot (where its code lives: the newest message of a slot
// wins) without revealing it; a message without a slot is its own.
func (q *Queue) key(m message.Message, id string) string {
	if m.Slot == "" {
		return "n" + id
	}
	mac := q.macs.Get().(hash.Hash)
	defer q.macs.Put(mac)
	mac.Reset()
	mac.Write([]byte(string(m.Channel) + "\x00" + m.Slot))
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(mac.Sum(sum[:0])[:12])
}

// sealJob is j's JSON sealed, base64: the nonce, then the ciphertext and
// its tag. The JSON leaves <, > and & as they are (json.Marshal would
// escape them, for HTML pages: an email's HTML body would grow by a
// third and take longer to read back); open reads either form.
func (q *Queue) sealJob(j Job) (string, error) {
	ns := q.seal.NonceSize()
	sealed := make([]byte, ns, ns+jobSize(j)+q.seal.Overhead())
	_, _ = rand.Read(sealed)
	plain := appendJob(sealed[ns:], j)
	sealed = q.seal.Seal(sealed, sealed, plain, []byte("otpguard job")) // in place
	return base64.StdEncoding.EncodeToString(sealed), nil
}

// jobSize is about the length of j's JSON: its strings with room for a
// few escapes, and its members' names.
func jobSize(j Job) int {
	m := j.Message
	n := len(j.ID) + len(j.Key) + len(m.Channel) + len(m.To) + len(m.Purpose) + len(m.Locale) + len(m.Code) +
		len(m.Subject) + len(m.Text) + len(m.HTML) + len(m.Slot) + len(m.Receipt)
	return n + n/8 + 200
}

// sealer is the jobs' AES-256-GCM under key (guard.DeriveKey of the
// secret and SealLabel): what seals them and what opens them.
func sealer(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// open is a job's body opened with the secret's key.
func open(aead cipher.AEAD, body string) (Job, error) {
	var j Job
	raw, err := base64.StdEncoding.DecodeString(body)
	if err != nil || len(raw) < aead.NonceSize() {
		return j, errors.New("queue: a malformed job")
	}
	ns := aead.NonceSize()
	plain, err := aead.Open(raw[ns:ns], raw[:ns], raw[ns:], []byte("otpguard job")) // in place
	if err != nil {
		return j, errors.New("queue: a job that does not open with this deployment's key")
	}
	if j, err = decodeJob(plain); err != nil || j.ID == "" || j.Key == "" {
		return j, errors.New("queue: a malformed job")
	}
	return j, nil
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
