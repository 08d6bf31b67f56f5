package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ledger is what the queue keeps in Redis, per destination and purpose
// (its keys share one cluster slot): the newest message's id, and a mark
// per message being sent or sent. Redis's TIME is read beside each
// script (ElastiCache Serverless refuses it inside one).
type Ledger struct {
	rdb   redis.UniversalClient
	batch Batch // nil: rdb's pipelines
}

// NewLedger keeps the ledger in rdb, its commands sent through batch
// when it is set.
func NewLedger(rdb redis.UniversalClient, batch Batch) *Ledger {
	return &Ledger{rdb: rdb, batch: batch}
}

// Batch sends Redis commands together, returning once each is answered
// (or has failed) with the first error among them, as a pipeline's Exec
// does: the local server's redisstore.Conn.Batch, whose batches join the
// store's coalesced calls.
type Batch func(ctx context.Context, cmds ...redis.Cmder) error

// send sends the commands queued on p (a pipeline never executed, in
// which go-redis builds them) through l.batch, or as one pipeline; a lone
// command as it is.
func (l *Ledger) send(ctx context.Context, p redis.Pipeliner, cmds ...redis.Cmder) error {
	switch {
	case l.batch != nil:
		p.Discard()
		return l.batch(ctx, cmds...)
	case len(cmds) == 1:
		p.Discard()
		return l.rdb.Process(ctx, cmds[0])
	}
	_, err := p.Exec(ctx)
	return err
}

// kept is how long a sent message's mark outlives it: past SQS's
// retention of the queue (15 minutes), no copy of it can come back.
const kept = 20 * time.Minute

// Claim is what a consumer may do with a message.
type Claim int

// The claims.
const (
	Claimed         Claim = iota // the consumer sends it, then marks it Done
	ClaimDuplicate               // sent already: a redelivery
	ClaimBusy                    // another consumer is sending it now
	ClaimSuperseded              // a newer message for its destination was queued
	ClaimExpired                 // its code ended
	ClaimDead                    // given up on (its units given back once): for the dead-letter queue
)

var claimNames = [...]string{"claimed", "duplicate", "busy", "superseded", "expired", "dead"}

func (c Claim) String() string { return claimNames[c] }

// A job's key is its slot's hashed name (or "n" and its id, a message
// of no slot), whose keys the ledger keeps; or, for a job of this
// process's queue whose code the code store numbered, the code's own key
// (message.Message.CodeKey: "og:{…}…"): that job's id is its code's
// number, and the newest is the number the code store keeps at the
// code's key + "v", in the same slot. Nothing is written for it when it
// is queued; its marks share that slot.
func codeKeyed(key string) bool { return strings.HasPrefix(key, "og:{") }

func latestKey(key string) string {
	if codeKeyed(key) {
		return key + "v"
	}
	return "og:{q" + key + "}l"
}

func versionKey(key string) string { return "og:{q" + key + "}v" }

func markKey(key, id string) string {
	if codeKeyed(key) {
		return key + "m" + id
	}
	return "og:{q" + key + "}m" + id
}

// enqueueSource makes ARGV[1] the newest message (KEYS[1]) unless one of
// a number at least ARGV[2] was (KEYS[2]), both for ARGV[3] ms.
const enqueueSource = `
local v = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) <= v then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
`

// Enqueue makes id the newest message for key, for ttl, and returns
// Redis's time. A message of version more than 0 (its code's number,
// message.Message.Version) is made the newest only over one of a lower
// version: of two sends at once, the message that stays the newest is
// the one whose code the code store kept, whichever is queued last.
func (l *Ledger) Enqueue(ctx context.Context, key, id string, ttl time.Duration, version int64) (time.Time, error) {
	p := l.rdb.Pipeline()
	now := p.Time(ctx)
	var set redis.Cmder
	if version > 0 {
		set = p.Eval(ctx, enqueueSource, []string{latestKey(key), versionKey(key)}, id, version, ttl.Milliseconds())
	} else {
		set = p.Set(ctx, latestKey(key), id, ttl)
	}
	if err := l.send(ctx, p, now, set); err != nil {
		return time.Time{}, err
	}
	return now.Val(), nil
}

// claimScript: the mark first (a message sent or being sent is left
// alone, unless the claim is this token's own: a claim whose reply was
// lost, asked again), then whether it is still the newest, and, for a
// job keyed by its code (KEYS[3]), whether the code can still be
// verified: a code expired (by Redis's clock), burned by wrong attempts
// or used is gone from the store, and its message is claimed never to be
// sent (as one whose code ended by the time: the holder settles it, and
// gives a failed send back once); a claim is a mark "s<token>" for lease
// ms.
const claimSource = `
local m = redis.call('GET', KEYS[2])
if m == 'done' then return 'duplicate' end
if m == 'dead' then return 'dead' end
if m and m ~= 's' .. ARGV[2] then return 'busy' end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 'superseded' end
redis.call('SET', KEYS[2], 's' .. ARGV[2], 'PX', ARGV[3])
if KEYS[3] and not redis.call('HGET', KEYS[3], 'h') then return 'ended' end
return 'claimed'
`

// claimKeys are the keys of a claim of message id of key: the newest,
// the mark, and for a job keyed by its code the code's own key (a hash
// whose field h holds the code's digest while it can be verified: see
// redisstore.Codes).
func claimKeys(key, id string) []string {
	if codeKeyed(key) {
		return []string{latestKey(key), markKey(key, id), key}
	}
	return []string{latestKey(key), markKey(key, id)}
}

// Claim asks to send message id of key, whose code ends at expires (Unix
// ms), under token (a new one when empty). When Claimed (or ClaimExpired:
// claimed, never to be sent), token ends the claim (Settle); a claim
// lapses by itself after lease. A claim already this token's is claimed
// again: only a consumer that alone holds the message may ask twice with
// one token (the in-process queue's worker, for all its attempts; an SQS
// consumer, within one receive); every SQS receive asks with a new one,
// since two consumers may hold the same message.
func (l *Ledger) Claim(ctx context.Context, key, id string, expires int64, lease time.Duration, token string) (c Claim, _ string, err error) {
	if token == "" {
		token = newID()
	}
	p := l.rdb.Pipeline()
	now := p.Time(ctx)
	res := p.Eval(ctx, claimSource, claimKeys(key, id), id, token, lease.Milliseconds())
	if err = l.send(ctx, p, now, res); err != nil {
		return 0, "", err
	}
	answer, _ := res.Val().(string)
	switch {
	case answer == "duplicate":
		return ClaimDuplicate, "", nil
	case answer == "dead":
		return ClaimDead, "", nil
	case answer == "busy":
		return ClaimBusy, "", nil
	case answer == "ended":
		return ClaimExpired, token, nil // its code is gone; held: the deliverer settles it
	case now.Val().UnixMilli() >= expires && answer == "claimed":
		return ClaimExpired, token, nil // held: the deliverer settles it
	case now.Val().UnixMilli() >= expires:
		return ClaimExpired, "", nil // and no longer the newest: not claimed
	case answer == "superseded":
		return ClaimSuperseded, "", nil
	case answer == "claimed":
		return Claimed, token, nil
	}
	return 0, "", fmt.Errorf("queue: the ledger answered %q", answer)
}

// Done marks message id sent (or never to be sent).
func (l *Ledger) Done(ctx context.Context, key, id string) error {
	p := l.rdb.Pipeline()
	return l.send(ctx, p, p.Set(ctx, markKey(key, id), "done", kept))
}

// settleScript ends a claim, if it is still this token's: released (a
// retry may claim it again) or marked final ("done": sent or never to be
// sent; "dead": given up on, for the dead-letter queue).
var settleScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= 's' .. ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
return 1
`)

// Settle ends the claim token holds on message id: final "" releases it,
// "done" or "dead" marks it so. held reports whether the claim was still
// this token's (a lapsed one may be another consumer's now): only the
// holder of a claim gives a send's units back, so they go back once.
func (l *Ledger) Settle(ctx context.Context, key, id, token, final string) (held bool, err error) {
	n, err := settleScript.Eval(ctx, l.rdb, []string{markKey(key, id)}, token, final, kept.Milliseconds()).Int()
	return n == 1, err
}

// Retire marks a message nobody claimed done (superseded after it had
// failed): true for the one caller that marked it, who gives its units
// back.
func (l *Ledger) Retire(ctx context.Context, key, id string) (bool, error) {
	p := l.rdb.Pipeline()
	set := p.SetNX(ctx, markKey(key, id), "done", kept)
	err := l.send(ctx, p, set)
	return set.Val(), err
}

// Current reports whether message id is still the newest of key and its
// code alive (asked again once its turn at the provider has come).
func (l *Ledger) Current(ctx context.Context, key, id string, expires int64) (Claim, error) {
	p := l.rdb.Pipeline()
	now, latest := p.Time(ctx), p.Get(ctx, latestKey(key))
	cmds := []redis.Cmder{now, latest}
	var code *redis.StringCmd // a job keyed by its code: whether the code can still be verified (see claimSource)
	if codeKeyed(key) {
		code = p.HGet(ctx, key, "h")
		cmds = append(cmds, code)
	}
	if err := l.send(ctx, p, cmds...); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	switch {
	case now.Val().UnixMilli() >= expires, code != nil && code.Val() == "":
		return ClaimExpired, nil
	case latest.Val() != id:
		return ClaimSuperseded, nil
	}
	return Claimed, nil
}
