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
)

// Client is the part of go-redis the stores use; *redis.Client,
// *redis.ClusterClient and *redis.Ring all fit.
type Client interface {
	redis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
	FunctionLoad(ctx context.Context, code string) *redis.StringCmd
	Pipeline() redis.Pipeliner
	Process(ctx context.Context, cmd redis.Cmder) error
}

// How the library runs on a server.
const (
	modeUnknown   int32 = iota
	modeFunctions       // a FUNCTION library, called with FCALL
	modeScripts         // one script per entry, called with EVALSHA
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
	// (FCALL), entry -> SHA-1 (EVALSHA)
	fcalls, evals map[string]any
}

// modes holds, per client, how the library runs on its server(s): a
// process may talk to a Redis 7 (functions) and an embedded miniredis
// (scripts) at once.
var modes sync.Map // Client -> *atomic.Int32

func modeOf(c Client) *atomic.Int32 {
	if m, ok := modes.Load(c); ok {
		return m.(*atomic.Int32)
	}
	m, _ := modes.LoadOrStore(c, new(atomic.Int32))
	return m.(*atomic.Int32)
}

func newLibrary() *library {
	sum := sha256.Sum256([]byte(librarySource))
	l := &library{version: "og_" + hex.EncodeToString(sum[:6]), scripts: map[string]string{}, shas: map[string]string{},
		fcalls: map[string]any{}, evals: map[string]any{}}
	l.functions = "#!lua name=" + l.version + "\nlocal ENTRY = nil\nlocal VERSION = '" + l.version + "'\n" + librarySource
	for _, e := range []string{entryBatch, entryCodePut, entryCodeCheck} {
		src := "local ENTRY = '" + e + "'\nlocal VERSION = nil\n" + librarySource
		sha := sha1.Sum([]byte(src))
		l.scripts[e], l.shas[e] = src, hex.EncodeToString(sha[:])
		l.fcalls[e], l.evals[e] = l.version+"_"+e, l.shas[e]
	}
	return l
}

// lib is shared by every store of the process: loading is per server.
var lib = sync.OnceValue(newLibrary) // built on first use: not in every process's init

// load installs the library on every node of c (every master of a
// cluster) and settles the mode: functions where the server has them,
// scripts otherwise.
func (l *library) load(ctx context.Context, c Client) error {
	mode := modeOf(c)
	each := func(ctx context.Context, n *redis.Client) error { return l.loadNode(ctx, n, mode) }
	var err error
	switch cc := c.(type) {
	case *redis.ClusterClient:
		err = cc.ForEachShard(ctx, each)
	case *redis.Ring:
		err = cc.ForEachShard(ctx, each)
	case *redis.Client:
		err = each(ctx, cc)
	default:
		err = l.loadNode(ctx, c, mode)
	}
	return err
}

func (l *library) loadNode(ctx context.Context, c Client, mode *atomic.Int32) error {
	if mode.Load() != modeScripts {
		err := c.FunctionLoad(ctx, l.functions).Err()
		switch {
		case err == nil || strings.Contains(err.Error(), "already exists"):
			mode.CompareAndSwap(modeUnknown, modeFunctions)
			return nil
		case isNetworkError(err):
			return err
		case !noFunctions(err):
			// The server has functions and refused the library: a bug in
			// it, not a reason to run it as slower scripts unnoticed.
			return fmt.Errorf("FUNCTION LOAD: %w", err)
		}
		// No functions here (miniredis, Redis < 7, a user not allowed
		// them): scripts from now on, for every node.
		mode.Store(modeScripts)
	}
	for _, e := range []string{entryBatch, entryCodePut, entryCodeCheck} {
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

// cmd queues or runs one call of entry on c (a client or a pipeline).
func (l *library) cmd(ctx context.Context, mode *atomic.Int32, c caller, entry string, keys []string, args []any) *redis.Cmd {
	all := make([]any, 0, 3+len(keys)+len(args))
	if mode.Load() == modeFunctions {
		all = append(all, "fcall", l.fcalls[entry], len(keys))
	} else {
		all = append(all, "evalsha", l.evals[entry], len(keys))
	}
	for _, k := range keys {
		all = append(all, k)
	}
	all = append(all, args...)
	cmd := redis.NewCmd(ctx, all...)
	_ = c.Process(ctx, onceCmd{cmd}) // the error is cmd's
	return cmd
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

// call runs entry on c, loading the library first when the mode is not
// known yet, and once more after a node answered that it lacks the code.
func (l *library) call(ctx context.Context, c Client, entry string, keys []string, args []any) (any, error) {
	mode := modeOf(c)
	if mode.Load() == modeUnknown {
		if err := l.load(ctx, c); err != nil {
			return nil, storeErr(fmt.Errorf("load the otpguard library: %w", err))
		}
	}
	v, err := l.cmd(ctx, mode, c, entry, keys, args).Result()
	if missing(err) {
		if err := l.load(ctx, c); err != nil {
			return nil, storeErr(fmt.Errorf("reload the otpguard library: %w", err))
		}
		v, err = l.cmd(ctx, mode, c, entry, keys, args).Result()
	}
	if err != nil {
		noteFailure(c, err)
		return nil, storeErr(err)
	}
	return v, nil
}

// reloads rate-limits topology reloads: unix ns of the last one started.
var reloads sync.Map // *redis.ClusterClient -> *atomic.Int64

// noteFailure asks a cluster client to read the slot map again after a
// node did not answer. Library calls are never retried (onceCmd), so
// go-redis's own retry path, which marks the node failing and finds the
// new master through MOVED, does not run: without this a client would
// keep calling a dead master until its periodic reload, and a failover
// would last longer than the cluster's own. At most one reload starts
// every 200ms.
func noteFailure(c Client, err error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok || !isNetworkError(err) {
		return
	}
	v, _ := reloads.LoadOrStore(cc, new(atomic.Int64))
	last := v.(*atomic.Int64)
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

// noFunctions reports an answer to FUNCTION LOAD that means the server
// (or this user) has no functions: an unknown command, or not allowed.
func noFunctions(err error) bool {
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "unknown command") || strings.Contains(m, "unknown subcommand") ||
		strings.Contains(m, "noperm") || strings.Contains(m, "not allowed") || strings.Contains(m, "not supported")
}
