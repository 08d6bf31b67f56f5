// Package redisstore is the guard.Store on Redis, through go-redis's
// UniversalClient: a single node, a Redis Cluster or an in-process
// miniredis all run the same Lua script (batch.lua).
//
// On a single node every operation of a decision goes into one script
// call, one round trip, so the whole decision is atomic. On a cluster the
// operations are grouped by hash tag (the guard puts a subject's keys under
// one tag), one script call per group, so no script spans two slots, in
// two phases: first the group of the most selective rule (the smallest
// limit) alone, then, only if it allowed, all the other groups pipelined,
// one round trip per node. Each group is atomic. When a group of the
// second phase denies, the store gives back what the allowing groups took
// (one more round trip, on such denials only). Between the two, a
// concurrent request may see the consumed units and be denied: the cluster
// errs towards denying, never towards admitting more than a limit. The
// first phase keeps that rare: requests that the most selective rule
// denies (most denials, in a flood) never touch the other slots.
//
// Replies lost to a timeout are not retried: the script may have run.
// Only NOSCRIPT (the script did not run) is answered by sending the script
// itself.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
)

//go:embed batch.lua
var batchLua string

var batchScript = redis.NewScript(batchLua)

// Client is the part of go-redis the store uses; *redis.Client,
// *redis.ClusterClient and *redis.Ring all fit.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// Store is the guard.Store on Redis.
type Store struct {
	rdb Client
	// grouped reports whether keys must be grouped by slot (cluster, ring).
	grouped bool
}

// New returns a Store on rdb. Build rdb with ContextTimeoutEnabled (as
// [NewClient] does) so that the guard's deadlines hold.
func New(rdb Client) *Store {
	_, single := rdb.(*redis.Client)
	return &Store{rdb: rdb, grouped: !single}
}

var _ guard.Store = (*Store)(nil)

// Preload loads the script on every node (every master of a cluster), so
// that the first decisions do not pay a NOSCRIPT round trip. Call it at
// start-up; the store recovers from a node that lost its scripts anyway.
func (s *Store) Preload(ctx context.Context) error {
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return batchScript.Load(ctx, n).Err() })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return batchScript.Load(ctx, n).Err() })
	default:
		err = batchScript.Load(ctx, s.rdb).Err()
	}
	if err != nil {
		return storeErr(fmt.Errorf("load script: %w", err))
	}
	return nil
}

// group is the ops of one hash tag and their places in the batch.
type group struct {
	idx  []int
	keys []string
	args []any
}

// Do applies ops; see the package comment for the atomicity it gives.
func (s *Store) Do(ctx context.Context, ops []guard.Op) ([]guard.OpResult, error) {
	groups := s.group(ops)
	res := make([]guard.OpResult, len(ops))
	if len(groups) == 1 {
		_, err := s.apply(ctx, groups, res)
		return res, err
	}
	// Phase 1: the most selective group alone. When it denies, no other
	// slot is touched, so a flood that one rule stops leaves no transient
	// consumption in the others' counters.
	first := mostSelective(ops, groups)
	ok, err := s.apply(ctx, groups[first:first+1], res)
	if err != nil {
		return nil, err
	}
	rest := slices.Delete(slices.Clone(groups), first, first+1)
	if !ok {
		for _, g := range rest {
			for _, i := range g.idx {
				res[i] = guard.OpResult{Allowed: true, Skipped: true}
			}
		}
		return res, nil
	}
	// Phase 2: the other groups, pipelined, one round trip per node.
	restOK, err := s.apply(ctx, rest, res)
	if err != nil {
		// Phase 1 consumed; the units stay taken until their window ends
		// (errs towards denying).
		return nil, err
	}
	if restOK {
		return res, nil
	}
	// Another slot denied: give back what the allowing slots took. If the
	// refund fails the units stay taken until their window ends: a denial
	// of a few later requests, never an excess admission.
	var refunds []guard.Op
	for i, op := range ops {
		if op.Kind == guard.Take && res[i].Allowed && res[i].Took {
			r := op
			r.Kind, r.At = guard.Refund, res[i].Now
			refunds = append(refunds, r)
			res[i].Remaining += op.Cost
			res[i].Took = false
		}
	}
	if len(refunds) > 0 {
		if _, err := s.run(ctx, s.group(refunds)); err != nil {
			return nil, fmt.Errorf("refund after a denial: %w", err)
		}
	}
	return res, nil
}

// apply runs groups (pipelined when several) and fills res for their
// ops. ok reports whether every group allowed.
func (s *Store) apply(ctx context.Context, groups []*group, res []guard.OpResult) (ok bool, err error) {
	replies, err := s.run(ctx, groups)
	if err != nil {
		return false, err
	}
	ok = true
	for gi, g := range groups {
		gok, now, rs, err := parseReply(replies[gi], len(g.idx))
		if err != nil {
			return false, fmt.Errorf("%w: %v", guard.ErrStoreUnavailable, err)
		}
		ok = ok && gok
		for j, i := range g.idx {
			rs[j].Now = now
			rs[j].Took = gok
			res[i] = rs[j]
		}
	}
	return ok, nil
}

// mostSelective returns the group holding the enforcing op with the
// smallest limit: the rule most likely to deny goes first.
func mostSelective(ops []guard.Op, groups []*group) int {
	best, bestLimit := 0, int64(-1)
	for gi, g := range groups {
		for _, i := range g.idx {
			if ops[i].Enforce && (bestLimit < 0 || ops[i].Limit < bestLimit) {
				best, bestLimit = gi, ops[i].Limit
			}
		}
	}
	return best
}

// group splits ops into one script call per hash tag (one per batch on a
// single node), encoding each op's keys and arguments.
func (s *Store) group(ops []guard.Op) []*group {
	var groups []*group
	byTag := map[string]*group{}
	for i, op := range ops {
		tag := ""
		if s.grouped {
			tag = guard.HashTag(op.Key)
		}
		g := byTag[tag]
		if g == nil {
			g = &group{args: []any{0}}
			byTag[tag] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.keys = append(g.keys, op.Key)
		g.args = appendOp(g.args, op)
		if op.Lockout != nil {
			g.keys = append(g.keys, op.LockKey, op.StrikeKey)
		}
	}
	for _, g := range groups {
		g.args[0] = len(g.idx)
	}
	return groups
}

// appendOp encodes op as the NF (13) fields per op batch.lua reads.
func appendOp(args []any, op guard.Op) []any {
	us := func(d time.Duration) int64 { return d.Microseconds() }
	var lockInitial, lockMax, lockReset int64
	lockFactor := "1"
	if l := op.Lockout; l != nil {
		lockInitial, lockMax, lockReset = us(l.Initial), us(l.Max), us(l.Reset)
		lockFactor = strconv.FormatFloat(l.Factor, 'f', -1, 64)
	}
	enforce := 0
	if op.Enforce {
		enforce = 1
	}
	var at int64
	if !op.At.IsZero() {
		at = op.At.UnixMicro()
	}
	return append(args, string(op.Kind), string(op.Algorithm), op.Limit, us(op.Window), op.Cost, enforce,
		lockInitial, lockFactor, lockMax, lockReset, op.Member, at, us(op.MaxWait))
}

// run sends one EVALSHA per group, pipelined when there are several, and
// resends the script body to the groups that answered NOSCRIPT.
func (s *Store) run(ctx context.Context, groups []*group) ([]any, error) {
	if len(groups) == 1 {
		v, err := batchScript.Run(ctx, s.rdb, groups[0].keys, groups[0].args...).Result()
		if err != nil {
			return nil, storeErr(err)
		}
		return []any{v}, nil
	}
	replies := make([]any, len(groups))
	cmds := s.pipe(ctx, groups, func(p redis.Pipeliner, g *group) *redis.Cmd {
		return batchScript.EvalSha(ctx, p, g.keys, g.args...)
	})
	var missing []*group
	var missingAt []int
	for i, c := range cmds {
		v, err := c.Result()
		switch {
		case err == nil:
			replies[i] = v
		case isNoScript(err):
			missing, missingAt = append(missing, groups[i]), append(missingAt, i)
		default:
			return nil, storeErr(err)
		}
	}
	if len(missing) > 0 {
		cmds = s.pipe(ctx, missing, func(p redis.Pipeliner, g *group) *redis.Cmd {
			return batchScript.Eval(ctx, p, g.keys, g.args...)
		})
		for j, c := range cmds {
			v, err := c.Result()
			if err != nil {
				return nil, storeErr(err)
			}
			replies[missingAt[j]] = v
		}
	}
	return replies, nil
}

func (s *Store) pipe(ctx context.Context, groups []*group, cmd func(redis.Pipeliner, *group) *redis.Cmd) []*redis.Cmd {
	p := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(groups))
	for i, g := range groups {
		cmds[i] = cmd(p, g)
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	return cmds
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// storeErr marks every failure to get an answer as ErrStoreUnavailable.
func storeErr(err error) error {
	if errors.Is(err, guard.ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", guard.ErrStoreUnavailable, err)
}

func parseReply(v any, n int) (bool, time.Time, []guard.OpResult, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2+5*n {
		return false, time.Time{}, nil, fmt.Errorf("unexpected script reply %T of length %d for %d ops", v, len(a), n)
	}
	ints := make([]int64, len(a))
	for i, x := range a {
		if ints[i], ok = x.(int64); !ok {
			return false, time.Time{}, nil, fmt.Errorf("unexpected script reply element %T", x)
		}
	}
	now := time.UnixMicro(ints[1])
	us := func(x int64) time.Duration { return time.Duration(x) * time.Microsecond }
	res := make([]guard.OpResult, n)
	for i := range res {
		f := ints[2+5*i:]
		res[i] = guard.OpResult{
			Allowed: f[0] == 1, Remaining: f[1], ResetAfter: us(f[2]), RetryAfter: us(f[3]), Locked: f[4] == 1,
		}
	}
	return ints[0] == 1, now, res, nil
}
