// Package redisstore is the store.Store on Redis, through go-redis: a
// single node, a Redis Cluster (ElastiCache) or an in-process miniredis
// all run the same Lua library (otpguard.lua), loaded once per node as a
// FUNCTION library where the server has functions and run as EVALSHA
// scripts elsewhere.
//
// On a single node every operation of a decision goes into one call, one
// round trip, so the whole decision is atomic. On a cluster the operations
// are grouped by hash tag (the guard gives all of a subject's rules keyed
// on the same dimensions one tag), one call per group, so no call spans
// two slots, in two phases: first the group of the most selective rule
// (the smallest limit) alone, then, only if it allowed, all the other
// groups pipelined, one round trip per node. Each group is atomic. When a
// group of the second phase denies, the store gives back what the allowing
// groups took (one more round trip, on such denials only); if that refund
// fails, the denial stands and the failure is logged: the units stay taken
// until their window ends, which errs towards denying, never towards
// admitting. The first phase keeps such refunds rare: requests that the
// most selective rule denies (most denials, in a flood) never touch the
// other slots.
//
// Replies lost to a timeout are never retried: the call may have run. Only
// an answer that the node lacks the code (NOSCRIPT, or "Function not
// found" on a node that restarted) is answered by loading it and calling
// again, since then nothing ran.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard/store"
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Log receives what a decision cannot carry: a refund that failed
	// after a cluster denial. Default: discarded.
	Log *slog.Logger
	// Coalesce, when more than 0, writes the calls that arrive together
	// (on the Conn: the codes' and blobs' too) as one pipeline, through
	// up to Coalesce batches at once: for a long-running host, never a
	// Lambda function (one request at a time). A single node only.
	Coalesce int
}

// Store is the store.Store on Redis.
type Store struct {
	conn *Conn
	// grouped reports whether keys must be grouped by slot (cluster, ring).
	grouped bool
	log     *slog.Logger
	statics statics
}

// New returns a Store on rdb. Build rdb with ContextTimeoutEnabled and
// MaxRetries -1 (as [NewClient] does) so that the guard's deadlines hold
// and lost replies are not resent.
func New(rdb Client, opts Options) *Store {
	conn := Connect(rdb)
	if opts.Coalesce > 0 && conn.co == nil {
		conn.coalesce(opts.Coalesce)
	}
	_, single := conn.Client.(*redis.Client)
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Store{conn: conn, grouped: !single, log: opts.Log}
}

var _ store.Store = (*Store)(nil)

// Preload loads the library on every master (never a replica), so that
// the first decisions do not pay for it. Call it at start-up; the store
// loads it on first use and after a node lost it anyway.
func (s *Store) Preload(ctx context.Context) error {
	if err := lib().reload(ctx, s.conn, s.conn.srv.loads.Load()); err != nil {
		return storeErr(fmt.Errorf("load the otpguard library: %w", err))
	}
	return nil
}

// Functions reports whether the library runs as a FUNCTION library
// (false: EVALSHA scripts, or not loaded yet).
func (s *Store) Functions() bool { return s.conn.srv.mode.Load() == modeFunctions }

// Clock reports whether the store passes the server's time to its scripts
// (the server refuses TIME inside them), and the largest error of that
// time now (0 when the scripts read TIME themselves).
func (s *Store) Clock() (passed bool, bound time.Duration) {
	k := &s.conn.srv.clock
	return k.passed.Load(), k.bound()
}

// group is the ops of one hash tag, their places in the batch, and their
// call.
type group struct {
	idx  []int
	call libCall
}

// lone is a batch's one group (a single node) and the list of it, made
// in one allocation.
type lone struct {
	g    group
	list [1]*group
}

// inOrder is idx for a batch's one group of up to len(inOrder) ops:
// each op in its own place, shared (never written).
var inOrder = func() (a [64]int) {
	for i := range a {
		a[i] = i
	}
	return a
}()

// Do applies ops; see the package comment for the atomicity it gives.
func (s *Store) Do(ctx context.Context, ops []store.Op) ([]store.OpResult, error) {
	if s.grouped {
		if d := conditional(ops); d >= 0 {
			return s.doDevice(ctx, ops, d)
		}
	}
	res := make([]store.OpResult, len(ops))
	return res, s.do(ctx, ops, res)
}

// conditional returns the index of the batch's device check when some op
// depends on it and sits in another slot, else -1.
func conditional(ops []store.Op) int {
	d := -1
	for i := range ops {
		if ops[i].Kind == store.DeviceCheck {
			d = i
		}
	}
	if d < 0 {
		return -1
	}
	for i := range ops {
		if ops[i].Cond != store.Always && ops[i].Tag != ops[d].Tag {
			return d
		}
	}
	return -1
}

// doDevice is Do on a cluster for a batch whose ops depend on a device
// check in another slot: the check first (its own round trip), then the
// ops whose condition holds, as any batch; the others did nothing.
func (s *Store) doDevice(ctx context.Context, ops []store.Op, d int) ([]store.OpResult, error) {
	res := make([]store.OpResult, len(ops))
	first := make([]store.OpResult, 1)
	if _, err := s.apply(ctx, s.group(ops[d:d+1]), first); err != nil {
		return nil, err
	}
	res[d] = first[0]
	trusted := first[0].Allowed
	rest := make([]store.Op, 0, len(ops)-1)
	idx := make([]int, 0, len(ops)-1)
	for i, op := range ops {
		switch {
		case i == d:
		case op.Cond != store.Always && (op.Cond == store.CondTrusted) != trusted:
			res[i] = store.OpResult{Allowed: true, Inapplicable: true, Now: first[0].Now}
		default:
			op.Cond = store.Always
			rest, idx = append(rest, op), append(idx, i)
		}
	}
	if len(rest) == 0 {
		return res, nil
	}
	rres := make([]store.OpResult, len(rest))
	if err := s.do(ctx, rest, rres); err != nil {
		return nil, err
	}
	for k, i := range idx {
		res[i] = rres[k]
	}
	return res, nil
}

// do is Do without device conditions across slots.
func (s *Store) do(ctx context.Context, ops []store.Op, res []store.OpResult) error {
	budget := 50 * time.Millisecond // what a refund after a denial may take: the call's own budget
	if dl, ok := ctx.Deadline(); ok {
		budget = max(budget, time.Until(dl))
	}
	groups := s.group(ops)
	if len(groups) == 1 {
		_, err := s.apply(ctx, groups, res)
		return err
	}
	// Phase 1: the most selective group alone. When it denies, no other
	// slot is touched, so a flood that one rule stops leaves no transient
	// consumption in the others' counters.
	first := mostSelective(ops, groups)
	ok, err := s.apply(ctx, groups[first:first+1], res)
	if err != nil {
		return err
	}
	rest := make([]*group, 0, len(groups)-1)
	rest = append(append(rest, groups[:first]...), groups[first+1:]...)
	if !ok {
		for _, g := range rest {
			for _, i := range g.idx {
				res[i] = store.OpResult{Allowed: true, Skipped: true}
			}
		}
		return nil
	}
	// Phase 2: the other groups, pipelined, one round trip per node.
	restOK, err := s.apply(ctx, rest, res)
	if err != nil {
		// Phase 1 consumed; the units stay taken until their window ends
		// (errs towards denying).
		return err
	}
	if !restOK {
		// the first phase's takes go back whether or not the caller still
		// waits (a hang-up, a deadline spent by the phases): left, they
		// would count until their window ends
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
		defer cancel()
		s.refund(rctx, ops, res)
	}
	return nil
}

// refund gives back what the groups that allowed took, after another
// group denied. The denial stands whatever happens here.
func (s *Store) refund(ctx context.Context, ops []store.Op, res []store.OpResult) {
	var refunds []store.Op
	for i, op := range ops {
		if op.Kind == store.Take && res[i].Taken > 0 {
			r := op
			r.Kind, r.Cost, r.Extra, r.At, r.Cond = store.Cancel, res[i].Taken, 0, res[i].Now, store.Always
			refunds = append(refunds, r)
			res[i].Remaining += res[i].Taken
			res[i].Taken = 0
		}
	}
	if len(refunds) == 0 {
		return
	}
	if err := s.run(ctx, s.group(refunds)); err != nil {
		s.log.ErrorContext(ctx, "refund after a cluster denial failed; the units stay taken until their window ends",
			"ops", len(refunds), "err", err)
	}
}

// apply runs groups (pipelined when several) and fills res for their
// ops. ok reports whether every group allowed.
func (s *Store) apply(ctx context.Context, groups []*group, res []store.OpResult) (ok bool, err error) {
	if err := s.run(ctx, groups); err != nil {
		return false, err
	}
	ok = true
	for _, g := range groups {
		gok, err := parseReply(g.call.reply, g.idx, res)
		if err != nil {
			return false, fmt.Errorf("%w: %v", store.ErrStoreUnavailable, err)
		}
		ok = ok && gok
	}
	return ok, nil
}

// mostSelective returns the group holding the enforcing op with the
// smallest limit: the rule most likely to deny goes first.
func mostSelective(ops []store.Op, groups []*group) int {
	best, bestLimit := 0, int64(-1)
	for gi, g := range groups {
		for _, i := range g.idx {
			if s := ops[i].Spec; s.Enforce && (bestLimit < 0 || s.Limit < bestLimit) {
				best, bestLimit = gi, s.Limit
			}
		}
	}
	return best
}

// group splits ops into one call per hash tag (one per batch on a single
// node), encoding each op's keys and arguments.
func (s *Store) group(ops []store.Op) []*group {
	plain := plainTakes(ops)
	if !s.grouped {
		l := &lone{}
		l.list[0] = &l.g
		if len(ops) <= len(inOrder) {
			l.g.idx = inOrder[:len(ops)]
		} else {
			l.g.idx = make([]int, len(ops))
			for i := range l.g.idx {
				l.g.idx[i] = i
			}
		}
		s.build(&l.g, ops, plain)
		return l.list[:]
	}
	var groups []*group
	for i := range ops {
		var g *group
		for _, c := range groups {
			if ops[c.idx[0]].Tag == ops[i].Tag {
				g = c
				break
			}
		}
		if g == nil {
			g = &group{}
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	for _, g := range groups {
		s.build(g, ops, plain)
	}
	return groups
}

// build encodes the call of g's ops: their keys, then the time's place,
// the count, and each op's arguments, each op's spec looked up once.
func (s *Store) build(g *group, ops []store.Op, plain bool) {
	nkeys := 0
	for _, i := range g.idx {
		nkeys += keysOf(&ops[i])
	}
	// the keys' places, the time's and the count's, then the arguments
	argv := argvOf(nkeys, 1+argsPerOp*len(g.idx))[:5+nkeys]
	argv[4+nkeys] = countArg(plain, len(g.idx))
	k := 3
	for _, i := range g.idx {
		st := s.statics.of(ops[i].Spec)
		k = putKeys(argv, k, &ops[i], st)
		argv = appendArgs(argv, &ops[i], st, plain)
	}
	g.call = libCall{entry: entryBatch, argv: argv, nkeys: nkeys}
}

// run makes one call per group, pipelined when there are several (see
// library.exec).
// Each group's answer is in its call's reply.
func (s *Store) run(ctx context.Context, groups []*group) error {
	var one [1]*libCall
	calls := one[:0]
	if len(groups) > 1 {
		calls = make([]*libCall, 0, len(groups))
	}
	for _, g := range groups {
		calls = append(calls, &g.call)
	}
	return lib().exec(ctx, s.conn, calls)
}

// storeErr marks every failure to get an answer as ErrStoreUnavailable.
func storeErr(err error) error {
	if errors.Is(err, store.ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrStoreUnavailable, err)
}
