package redisstore

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed otpguard.lua
var librarySource string

// The entry points of otpguard.lua.
const (
	entryBatch     = "batch"
	entryCodePut   = "code_put"
	entryCodeCheck = "code_check"
	entryBlobPut   = "blob_put"
	entryBlobGet   = "blob_get"
	entryBlobDel   = "blob_del"
	entryBlobOnce  = "blob_once"
)

var entries = []string{entryBatch, entryCodePut, entryCodeCheck, entryBlobPut, entryBlobGet, entryBlobDel, entryBlobOnce}

// Client is the part of go-redis the stores use; *redis.Client,
// *redis.ClusterClient and *redis.Ring all fit.
type Client interface {
	redis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
	FunctionLoad(ctx context.Context, code string) *redis.StringCmd
	Time(ctx context.Context) *redis.TimeCmd
	Pipeline() redis.Pipeliner
	Process(ctx context.Context, cmd redis.Cmder) error
}

// How the library runs on a server.
const (
	modeUnknown   int32 = iota
	modeFunctions       // a FUNCTION library, called with FCALL
	modeScripts         // one script per entry, called with EVALSHA (EVAL when a node lacks it)
)

// library is otpguard.lua in its two forms. The function names carry a
// hash of the source, so two versions of otpguard on one Redis (a rolling
// deployment) each call their own code.
type library struct {
	version   string            // og_<12 hex digits of the source's SHA-256>
	functions string            // the FUNCTION LOAD text
	scripts   map[string]string // entry -> EVAL text
	shas      map[string]string // entry -> SHA-1 of its EVAL text
	// the first two words of a call, boxed once: entry -> function name
	// (FCALL), entry -> SHA-1 (EVALSHA), entry -> source (EVAL)
	fcalls, evalshas, evals map[string]any
}

// server is what the store has learnt of one client's server(s): how the
// library runs there, and, where scripts may not read TIME, the servers'
// clock as seen from here. A process may talk to a Redis 7 (functions)
// and an embedded miniredis (scripts) at once.
type server struct {
	mode  atomic.Int32
	clock serverClock
	// loading admits one load of the library at a time; loads counts the
	// loads done, so that callers who waited for one do not load again.
	loading chan struct{}
	loads   atomic.Int64
}

// Conn is a client of one Redis (a node, a cluster or a ring) with what
// the stores learn of it: how the library runs there, its clock where
// scripts may not read TIME, the library's loads, the last reload of a
// cluster's slot map. The stores built on one Conn (New, NewCodes,
// NewBlobs) share it; each builds its own on a bare Client.
type Conn struct {
	Client
	srv      server
	reloaded atomic.Int64 // unix ns of the last slot-map reload started
	co       *coalescer   // set by coalesce: lone calls go through it
}

// coalesce makes the calls of c that arrive together go as one pipeline,
// through up to lanes batches at once (a single node only: a cluster's
// calls go as they are); before the first call (New).
func (c *Conn) coalesce(lanes int) {
	if single, ok := c.Client.(*redis.Client); ok && lanes > 0 {
		c.co = newCoalescer(single, lanes)
	}
}

// Connect returns a Conn on c (c itself when it is one).
func Connect(c Client) *Conn {
	if conn, ok := c.(*Conn); ok {
		return conn
	}
	conn := &Conn{Client: c}
	conn.srv.loading = make(chan struct{}, 1)
	return conn
}

// reload loads the library unless another caller finished a load after
// this one saw seen (the value of loads when it found the code missing):
// a thousand requests that meet a cold or restarted server wait for one
// load, instead of each sending every script over a connection pool too
// small for them all (which timed out on two cores).
func (l *library) reload(ctx context.Context, c *Conn, seen int64) error {
	st := &c.srv
	select {
	case st.loading <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-st.loading }()
	if st.loads.Load() != seen {
		return nil
	}
	err := l.load(ctx, c)
	if err == nil {
		st.loads.Add(1)
	}
	return err
}

func newLibrary() *library {
	sum := sha256.Sum256([]byte(librarySource))
	l := &library{version: "og_" + hex.EncodeToString(sum[:6]), scripts: map[string]string{}, shas: map[string]string{},
		fcalls: map[string]any{}, evalshas: map[string]any{}, evals: map[string]any{}}
	l.functions = functionLibrary(l.version, librarySource)
	for _, e := range entries {
		src := "local ENTRY = '" + e + "'\nlocal VERSION = nil\n" + librarySource
		sha := sha1.Sum([]byte(src))
		l.scripts[e], l.shas[e] = src, hex.EncodeToString(sha[:])
		l.fcalls[e], l.evalshas[e], l.evals[e] = l.version+"_"+e, l.shas[e], src
	}
	return l
}

// functionLibrary is src as a FUNCTION library named name, its entries
// registered as <name>_<entry>.
func functionLibrary(name, src string) string {
	return "#!lua name=" + name + "\nlocal ENTRY = nil\nlocal VERSION = '" + name + "'\n" + src
}

// lib is shared by every store of the process: loading is per server.
var lib = sync.OnceValue(newLibrary) // built on first use: not in every process's init

// load installs the library on every master of c (never a replica: a
// replica refuses FUNCTION LOAD, and ElastiCache Serverless advertises
// one on a port its security group keeps closed) and settles the mode:
// functions where the server has them, scripts otherwise.
func (l *library) load(ctx context.Context, c *Conn) error {
	st := &c.srv
	each := func(ctx context.Context, n *redis.Client) error { return l.loadNode(ctx, n, st) }
	switch cc := c.Client.(type) {
	case *redis.ClusterClient:
		return cc.ForEachMaster(ctx, each)
	case *redis.Ring:
		return cc.ForEachShard(ctx, each)
	case *redis.Client:
		return each(ctx, cc)
	}
	return l.loadNode(ctx, c, st)
}

func (l *library) loadNode(ctx context.Context, c Client, st *server) error {
	if st.mode.Load() != modeScripts {
		err := c.FunctionLoad(ctx, l.functions).Err()
		switch {
		case err == nil || strings.Contains(err.Error(), "already exists"):
			st.mode.CompareAndSwap(modeUnknown, modeFunctions)
			return nil
		case isNetworkError(err):
			return err
		}
		// No functions here (ElastiCache Serverless, miniredis, Redis < 7,
		// a user not allowed them): scripts from now on, on every node.
		st.mode.Store(modeScripts)
	}
	for _, e := range entries {
		if err := c.ScriptLoad(ctx, l.scripts[e]).Err(); err != nil {
			return err
		}
	}
	return nil
}

// caller is a client or a pipeline.
type caller interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// onceCmd is a call of the library that go-redis never sends twice. On a
// connection lost after the command was written (EOF, a reset) the
// cluster client would resend it, to the same node and then another: the
// script may have run, and would count twice. MOVED and ASK answers,
// where nothing ran, are still followed.
type onceCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (onceCmd) NoRetry() bool { return true }

// libCall is one call of an entry, and its outcome. argv is the whole
// command, built once: three places for the verb, the entry's name and
// the number of keys (nkeys, set), the keys, ARGV[1] (the time) and the
// entry's other arguments. cmd fills the verb, the name and the time on
// every try.
type libCall struct {
	entry string
	argv  []any
	nkeys int
	reply any
}

// argvOf starts a call's argv with room for its keys and args arguments:
// the three places, then the keys as they are appended.
func argvOf(nkeys, args int) []any {
	argv := make([]any, 3, 4+nkeys+args)
	argv[2] = nkeys
	return argv
}

// newCall is a call of entry on keys, args its arguments after ARGV[1].
func newCall(entry string, keys []string, args []any) *libCall {
	argv := argvOf(len(keys), len(args))
	for _, k := range keys {
		argv = append(argv, k)
	}
	argv = append(append(argv, nil), args...)
	return &libCall{entry: entry, argv: argv, nkeys: len(keys)}
}

// how a call is sent: FCALL, EVALSHA, or EVAL with the whole source.
type how int

const (
	byName how = iota // FCALL or EVALSHA, as the mode says
	bySource
)

// cmd queues or runs one call on c (a client or a pipeline). at is ARGV[1].
func (l *library) cmd(ctx context.Context, mode int32, h how, c caller, call *libCall, at string) *redis.Cmd {
	argv := call.argv
	switch {
	case h == bySource:
		argv[0], argv[1] = "eval", l.evals[call.entry]
	case mode == modeFunctions:
		argv[0], argv[1] = "fcall", l.fcalls[call.entry]
	default:
		argv[0], argv[1] = "evalsha", l.evalshas[call.entry]
	}
	// (a try before this one is over: its answer was read, or it failed
	// and nothing tries again)
	argv[3+call.nkeys] = at
	cmd := redis.NewCmd(ctx, argv...)
	_ = c.Process(ctx, onceCmd{cmd}) // the error is cmd's
	return cmd
}

// call runs one entry on c.
func (l *library) call(ctx context.Context, c *Conn, entry string, keys []string, args []any) (any, error) {
	lc := newCall(entry, keys, args)
	if err := l.exec(ctx, c, []*libCall{lc}); err != nil {
		return nil, err
	}
	return lc.reply, nil
}

// exec runs calls on c, pipelined when there are several (one round trip
// per node), and fills their replies. A call whose answer says it did not
// run is sent again: a node that lacks the code (NOSCRIPT, or "Function
// not found" on a node that restarted) gets the function library loaded
// again, or the script by EVAL (which also caches it there); a server
// whose scripts may not read TIME gets the time passed in. A call that
// may have run (a lost reply, a timeout) is never sent again.
func (l *library) exec(ctx context.Context, c *Conn, calls []*libCall) error {
	st := &c.srv
	if seen := st.loads.Load(); st.mode.Load() == modeUnknown {
		if err := l.reload(ctx, c, seen); err != nil && isNetworkError(err) {
			return storeErr(fmt.Errorf("load the otpguard library: %w", err))
		} // a server that refuses loading still runs EVAL
	}
	todo, h := calls, byName
	for attempt := 0; ; attempt++ {
		seen := st.loads.Load()
		at, err := st.clock.arg(ctx, c)
		if err != nil {
			return storeErr(fmt.Errorf("read the server's clock: %w", err))
		}
		mode := st.mode.Load()
		cmds := make([]*redis.Cmd, len(todo))
		switch {
		case len(todo) == 1 && c.co != nil:
			cmds[0] = l.cmd(ctx, mode, h, c.co, todo[0], at)
		case len(todo) == 1:
			cmds[0] = l.cmd(ctx, mode, h, c, todo[0], at)
		default:
			p := c.Pipeline()
			for i, lc := range todo {
				cmds[i] = l.cmd(ctx, mode, h, p, lc, at)
			}
			_, _ = p.Exec(ctx) // each command carries its own error
		}
		var again []*libCall
		lacked := false
		for i, cmd := range cmds {
			v, err := cmd.Result()
			switch {
			case err == nil:
				todo[i].reply = v
			case attempt < 3 && noClock(err):
				st.clock.pass()
				again = append(again, todo[i])
			case attempt < 3 && missing(err):
				again = append(again, todo[i])
				lacked = true
			default:
				c.noteFailure(err)
				return storeErr(err)
			}
		}
		if len(again) == 0 {
			return nil
		}
		if lacked && h == byName {
			// A function library is loaded again once (a node restarted
			// empty); otherwise the script goes whole, by EVAL.
			if mode != modeFunctions || attempt > 0 || l.reload(ctx, c, seen) != nil {
				h = bySource
			}
		}
		todo = again
	}
}

// missing reports an error that says the call did not run because the
// node lacks the code (a restarted node): safe to load and call again.
func missing(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.HasPrefix(s, "NOSCRIPT") || strings.Contains(s, "Function not found")
}

// noClock reports the library's answer that the server's scripts may not
// read TIME and no time was passed: nothing ran.
func noClock(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "OTPGUARD_NOCLOCK")
}

// noteFailure asks a cluster client to read the slot map again after a
// node did not answer. Library calls are never retried (onceCmd), so
// go-redis's own retry path, which marks the node failing and finds the
// new master through MOVED, does not run: without this a client would
// keep calling a dead master until its periodic reload, and a failover
// would last longer than the cluster's own. At most one reload starts
// every 200ms.
func (c *Conn) noteFailure(err error) {
	cc, ok := c.Client.(*redis.ClusterClient)
	if !ok || !isNetworkError(err) {
		return
	}
	last := &c.reloaded
	now := time.Now().UnixNano()
	if l := last.Load(); now-l < int64(200*time.Millisecond) || !last.CompareAndSwap(l, now) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cc.ReloadState(ctx)
	}()
}

// isNetworkError tells a failure to reach the server from an answer.
func isNetworkError(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}
