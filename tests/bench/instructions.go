package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var callgrindDir = flag.String("callgrind-dir", "", "keep each instructions case's callgrind output in this directory (for callgrind_annotate)")

// instructions counts the user-space instructions redis-server runs per
// call, under valgrind's callgrind (counted only while the calls run,
// pipelined by 100, so a call's share of the network is small and the
// same for each): otpguard's 3-rule allowed decision (the library's batch,
// with the arguments the guard sent), the raw-Lua floor and a function
// that returns at once given the same arguments. Unlike time, the count
// is the same from run to run and whatever else the machine does, so a
// change to the library shows its cost exactly.
func (b *bench) instructions(ctx context.Context) error {
	if _, err := exec.LookPath("valgrind"); err != nil {
		return fmt.Errorf("valgrind is not installed (apt-get install valgrind; make bench installs it)")
	}
	// the arguments of a decision, as the guard sends them
	args, err := b.decisionArgs(ctx)
	if err != nil {
		return err
	}
	const empty = "#!lua name=bench_empty\nredis.register_function('bench_empty', function(keys, args) return 1 end)"
	const floor = "#!lua name=bench_floor\nredis.register_function('bench_floor', function(KEYS, ARGV)\n" +
		"for i = 1, 3 do\n  local n = redis.call('INCR', KEYS[i])\n  if n == 1 then redis.call('PEXPIRE', KEYS[i], 3600000) end\n" +
		"  if n > 1000000000 then return 0 end\nend\nreturn 1 end)"
	keys := keysOf(1)
	cases := []struct {
		name  string
		lib   string // a library to load, or none (the guard loads its own)
		call  []any
		fresh bool // the first key (the destination's) new on every call
	}{
		{"a function that returns at once (the decision's arguments)", empty, append([]any{"fcall", "bench_empty"}, args[2:]...), false},
		{"raw Lua (floor)", floor, []any{"fcall", "bench_floor", 3, keys[0], keys[1], keys[2]}, false},
		{"otpguard", "", args, false},
		{"raw Lua (floor), a new destination each call", floor, []any{"fcall", "bench_floor", 3, keys[0], keys[1], keys[2]}, true},
		{"otpguard, a new destination each call", "", args, true},
	}
	fmt.Printf("\ninstructions: redis-server's user-space instructions per call (valgrind callgrind, 5000 calls pipelined by 100), a 3-rule allowed decision\n\n")
	tw := newTable("call\tinstructions/call\tvs the floor\t")
	var floorN float64
	for i, c := range cases {
		n, err := b.countInstructions(ctx, c.lib, c.call, c.fresh, fmt.Sprintf("callgrind.%d", i))
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if strings.HasPrefix(c.name, "raw Lua") {
			floorN = n
		}
		ratio := "—"
		if floorN > 0 {
			ratio = fmt.Sprintf("%.2f×", n/floorN)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t\n", c.name, n, ratio)
	}
	return tw.Flush()
}

// allowedRules are the allowed section's rules.
const allowedRules = `
rules:
  - {name: per-destination, action: bench, key: [destination], limit: 1000000000, window: 1h}
  - {name: per-ip, action: bench, key: [ip], limit: 1000000000, window: 1h}
  - {name: global, action: bench, key: [global], limit: 1000000000, window: 1h}
`

// decisionArgs is the FCALL a guard sends for the bench's allowed
// decision (captured by a hook on its client).
func (b *bench) decisionArgs(ctx context.Context) ([]any, error) {
	c := redis.NewClient(&redis.Options{Addr: b.srv.Addr})
	defer c.Close()
	var args []any
	c.AddHook(captureHook{&args})
	g, err := newGuard(ctx, c, allowedRules)
	if err != nil {
		return nil, err
	}
	if _, err := g.Allow(ctx, requests("bench")[0]); err != nil {
		return nil, err
	}
	if len(args) < 2 || fmt.Sprint(args[0]) != "fcall" {
		return nil, fmt.Errorf("the guard sent no FCALL (%q)", args)
	}
	return args, nil
}

// countInstructions runs redis-server under callgrind, loads lib (or the
// guard's library, by one decision), and counts the instructions of 5000
// calls (the output kept as name in -callgrind-dir, when given). With
// fresh, the call's first key is new on every call.
func (b *bench) countInstructions(ctx context.Context, lib string, call []any, fresh bool, name string) (float64, error) {
	dir, err := os.MkdirTemp("", "otpguard-callgrind-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command("valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file="+out,
		"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	fail := func(err error) (float64, error) {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return 0, fmt.Errorf("%w\n%s", err, log)
	}
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) { // (go-redis would log each refused dial)
		if conn, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			conn.Close()
			break
		}
		if time.Since(start) > time.Minute {
			return fail(fmt.Errorf("redis-server under valgrind did not start"))
		}
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, MaxRetries: -1})
	defer c.Close()
	if lib != "" {
		if err := c.FunctionLoad(ctx, lib).Err(); err != nil {
			return fail(err)
		}
	} else if _, err := newGuard(ctx, c, allowedRules); err != nil { // loads the guard's library (Preload)
		return fail(err)
	}
	calls, first := 0, call[3]
	pipelined := func(n int) error {
		p := c.Pipeline()
		for i := range n {
			if calls++; fresh {
				call = slices.Clone(call)
				call[3] = fmt.Sprint(first, ":", calls)
			}
			p.Do(ctx, call...)
			if i%100 == 99 {
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := pipelined(500); err != nil { // warm: the library's caches, the keys
		return fail(err)
	}
	ctl := func(on string) error {
		if o, err := exec.Command("callgrind_control", "-i", on, strconv.Itoa(cmd.Process.Pid)).CombinedOutput(); err != nil {
			return fmt.Errorf("callgrind_control: %v: %s", err, o)
		}
		return nil
	}
	const n = 5000
	if err := ctl("on"); err != nil {
		return 0, err
	}
	if err := pipelined(n); err != nil {
		return fail(err)
	}
	if err := ctl("off"); err != nil {
		return 0, err
	}
	// callgrind writes its counts when the server exits (SHUTDOWN has
	// no answer: the error is the connection closing)
	_ = c.Do(ctx, "shutdown", "nosave").Err()
	if err := cmd.Wait(); err != nil {
		return fail(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return 0, err
	}
	if *callgrindDir != "" {
		if err := os.WriteFile(filepath.Join(*callgrindDir, name), raw, 0o644); err != nil {
			return 0, err
		}
	}
	m := regexp.MustCompile(`(?m)^totals: (\d+)`).FindSubmatch(raw)
	if m == nil {
		return 0, fmt.Errorf("no totals in callgrind's output")
	}
	total, _ := strconv.ParseFloat(string(m[1]), 64)
	return total / n, nil
}

// captureHook keeps the arguments of the last FCALL or EVALSHA.
type captureHook struct{ args *[]any }

func (h captureHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h captureHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := strings.ToLower(cmd.Name()); n == "fcall" || n == "evalsha" {
			*h.args = append([]any(nil), cmd.Args()...)
		}
		return next(ctx, cmd)
	}
}
func (h captureHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
