package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/identity"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

var callgrindDir = flag.String("callgrind-dir", "", "keep each instructions case's callgrind output in this directory (for callgrind_annotate)")

// instructions counts the user-space instructions redis-server runs per
// call, under valgrind's callgrind (counted only while the calls run,
// pipelined by 100, so a call's share of the network is small and the
// same for each): otpguard's 3-rule allowed decision (the library's batch,
// with the arguments the guard sent), the raw-Lua floor, the contract's
// floor (what any decision answering as the contract asks does) and a function
// that returns at once given the same arguments; the decision and the
// floor again with a new destination on every call; and the calls a
// guard under the default rules makes for an email send and for a login
// (distinct subjects). Unlike time, the count is the same from run to run
// (to about 2%) whatever else the machine does, so a change to the
// library shows its cost.
func (b *bench) instructions(ctx context.Context) error {
	args, err := b.decisionArgs(ctx)
	if err != nil {
		return err
	}
	const empty = "#!lua name=bench_empty\nredis.register_function('bench_empty', function(keys, args) return 1 end)"
	const floor = "#!lua name=bench_floor\nredis.register_function('bench_floor', function(KEYS, ARGV)\n" +
		"for i = 1, 3 do\n  local n = redis.call('INCR', KEYS[i])\n  if n == 1 then redis.call('PEXPIRE', KEYS[i], 3600000) end\n" +
		"  if n > 1000000000 then return 0 end\nend\nreturn 1 end)"
	contract := "#!lua name=bench_contract\nredis.register_function('bench_contract', function(KEYS, ARGV)\n" + contractLua + "\nend)"
	keys := keysOf(1)
	same := func(call ...any) func(int) []any { return func(int) []any { return call } }
	// the destination's key (the first) new on every call
	fresh := func(call ...any) func(int) []any {
		return func(i int) []any {
			c := slices.Clone(call)
			c[3] = fmt.Sprint(call[3], ":", i)
			return c
		}
	}
	logins, err := b.guardCalls(ctx, instrWarm+instrCalls, func(g *guard.Guard, i int) error { return login(ctx, g, i) })
	if err != nil {
		return err
	}
	sends, err := b.guardCalls(ctx, instrWarm+instrCalls, func(g *guard.Guard, i int) error { return emailSend(ctx, g, i) })
	if err != nil {
		return err
	}
	cases := []struct {
		name string
		lib  string          // a library to load, or none (the guard loads its own)
		call func(int) []any // the i-th call
		per  int             // calls per row's unit
	}{
		{"a function that returns at once (the decision's arguments)", empty, same(append([]any{"fcall", "bench_empty"}, args[2:]...)...), 1},
		{"raw Lua (floor)", floor, same("fcall", "bench_floor", 3, keys[0], keys[1], keys[2]), 1},
		{"the contract floor (Redis's clock, the takes, the 20 integers answered packed)", contract, same("fcall", "bench_contract", 3, keys[0], keys[1], keys[2]), 1},
		{"otpguard", "", same(args...), 1},
		{"raw Lua (floor), a new destination each call", floor, fresh("fcall", "bench_floor", 3, keys[0], keys[1], keys[2]), 1},
		{"otpguard, a new destination each call", "", fresh(args...), 1},
		{"otpguard, an email send's decision under the default rules (3 rules, packed in 2 hashes)", "", func(i int) []any { return sends[i] }, 1},
		{"otpguard, a login under the default rules (its decision and settlement)", "", func(i int) []any { return logins[i] }, 2},
	}
	fmt.Printf("\ninstructions: redis-server's user-space instructions per call (valgrind callgrind, %d calls pipelined by 100, after %d)\n\n", instrCalls, instrWarm)
	tw := newTable("call\tinstructions/call\tvs the floor\t")
	var floorN float64
	for i, c := range cases {
		n, err := b.countInstructions(ctx, c.lib, c.call, fmt.Sprintf("callgrind.%d", i))
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		n *= float64(c.per)
		if strings.HasPrefix(c.name, "raw Lua") {
			floorN = n
		}
		ratio := "—"
		if floorN > 0 && c.per == 1 {
			ratio = fmt.Sprintf("%.2f×", n/floorN)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t\n", c.name, n, ratio)
	}
	return tw.Flush()
}

// parts takes the 3-rule allowed decision's instructions apart: functions
// given the decision's arguments and keys that each do one more of the
// things the library's call does (read TIME, take the three counters,
// answer the decision's 20 integers packed into one string, as the
// library does where the server has struct.pack); the differences are
// what each costs, and what the library's call costs beyond them is its
// own Lua. (The counters' keys keep their window's end in their value:
// a take reads no TTL. The reply's part is mostly filling its table: on
// 2026-11-29 a reply of 8 integers instead of 20, for a batch that
// allowed every op, left the library's call at the same count.)
func (b *bench) parts(ctx context.Context) error {
	args, err := b.decisionArgs(ctx)
	if err != nil {
		return err
	}
	// each function does what the one before it does, and one thing more
	const lib = `#!lua name=bench_parts
local OUT = {}
local FMT -- (the standard libraries are not reachable while a library loads)
local function incr(keys)
  for i = 1, 3 do
    redis.call('INCRBY', keys[i], '1')
  end
end
local function reply()
  local o = OUT
  o[1], o[2] = 1, 1764300000123456
  for i = 0, 2 do
    local j = 2 + 6 * i
    o[j + 1], o[j + 2], o[j + 3], o[j + 4], o[j + 5], o[j + 6] = 1, 999999000 + i, 3599000000 + i, 0, 0, 1
  end
  if not FMT then FMT = '>' .. string.rep('l', 20) end
  return struct.pack(FMT, unpack(o, 1, 20))
end
redis.register_function('p_args', function(keys, args) return 1 end)
redis.register_function('p_time', function(keys, args) redis.call('TIME') return 1 end)
redis.register_function('p_incr', function(keys, args) redis.call('TIME') incr(keys) return 1 end)
redis.register_function('p_reply', function(keys, args) redis.call('TIME') incr(keys) return reply() end)`
	fn := func(name string) func(int) []any {
		c := append([]any{"fcall", name}, args[2:]...)
		return func(int) []any { return c }
	}
	steps := []struct{ name, part string }{
		{"p_args", "the call itself, with the decision's 3 keys and 8 arguments"},
		{"p_time", "reading TIME"},
		{"p_incr", "3 × INCRBY"},
		{"p_reply", "filling a table of 20 integers and answering them packed (struct.pack)"},
	}
	fmt.Printf("\nparts: the 3-rule allowed decision's redis-server instructions per call, taken apart (valgrind callgrind, %d calls pipelined by 100, after %d)\n\n", instrCalls, instrWarm)
	tw := newTable("part\tinstructions/call\t")
	var prev float64
	for i, st := range steps {
		n, err := b.countInstructions(ctx, lib, fn(st.name), fmt.Sprintf("parts.%d", i))
		if err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t\n", st.part, n-prev)
		prev = n
	}
	whole, err := b.countInstructions(ctx, "", func(int) []any { return args }, "parts.otpguard")
	if err != nil {
		return err
	}
	fmt.Fprintf(tw, "%s\t%.0f\t\n", "the library's own Lua (the rest)", whole-prev)
	fmt.Fprintf(tw, "%s\t%.0f\t\n", "otpguard's call, in all", whole)
	return tw.Flush()
}

// The calls counted, after the calls that warm the library's caches and
// make the keys.
const instrWarm, instrCalls = 500, 5000

// allowedRules are the allowed section's rules.
const allowedRules = `
rules:
  - {name: per-destination, action: bench, key: [destination], limit: 1000000000, window: 1h}
  - {name: per-ip, action: bench, key: [ip], limit: 1000000000, window: 1h}
  - {name: global, action: bench, key: [global], limit: 1000000000, window: 1h}
`

// decisionArgs is the FCALL a guard sends for the bench's allowed
// decision (captured by a hook on its client). Every section that asks
// for it counts instructions under valgrind, so it fails first when
// valgrind is not installed.
func (b *bench) decisionArgs(ctx context.Context) ([]any, error) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		return nil, fmt.Errorf("valgrind is not installed (apt-get install valgrind; make bench installs it)")
	}
	c := redis.NewClient(&redis.Options{Addr: b.srv.Addr})
	defer c.Close()
	h := &callsHook{}
	c.AddHook(h)
	g, err := newGuard(ctx, c, allowedRules)
	if err != nil {
		return nil, err
	}
	if _, err := g.Allow(ctx, requests("bench")[0]); err != nil {
		return nil, err
	}
	if len(h.calls) != 1 || fmt.Sprint(h.calls[0][0]) != "fcall" {
		return nil, fmt.Errorf("the guard sent no FCALL alone (%q)", h.calls)
	}
	return h.calls[0], nil
}

// guardCalls are the library calls a guard under the default rules sends
// (captured by a hook on its client, the calls made on the bench's
// server) for attempt(g, i) of the i-th distinct subject, n calls in all.
func (b *bench) guardCalls(ctx context.Context, n int, attempt func(*guard.Guard, int) error) ([][]any, error) {
	c := redis.NewClient(&redis.Options{Addr: b.srv.Addr})
	defer c.Close()
	h := &callsHook{}
	c.AddHook(h)
	g, err := newGuard(ctx, c, "")
	if err != nil {
		return nil, err
	}
	for i := 0; len(h.calls) < n; i++ {
		if err := attempt(g, i); err != nil {
			return nil, err
		}
	}
	return h.calls[:n], nil
}

// login is a login of the i-th of distinct accounts from distinct
// networks.
func login(ctx context.Context, g *guard.Guard, i int) error {
	r := guard.Request{Action: "login", Subject: guard.Subject{Account: fmt.Sprintf("instructions%d@example.com", i), IP: benchIP(i)}}
	allowed, err := signIn(ctx, g, r)
	if err == nil && !allowed {
		err = fmt.Errorf("login %d denied", i)
	}
	return err
}

// emailSend is the decision of a code sent by email (as the API asks it)
// to the i-th of distinct addresses from distinct networks.
func emailSend(ctx context.Context, g *guard.Guard, i int) error {
	dest, _ := identity.ParseEmail(fmt.Sprintf("instructions%d@example.com", i))
	r := guard.Request{Action: "otp.send", Subject: guard.Subject{Destination: dest, IP: benchIP(i)},
		Attributes: map[string]string{"channel": "email", "purpose": "verify"}}
	d, err := g.Allow(ctx, r)
	if err == nil && !d.Allowed {
		err = fmt.Errorf("send %d denied by %s", i, d.DeniedBy)
	}
	return err
}

// countInstructions runs redis-server under callgrind, loads lib (or the
// guard's library, by one decision), and counts the instructions of instrCalls
// calls (the output kept as name in -callgrind-dir, when given), call(i)
// the i-th of them (the warming calls first).
func (b *bench) countInstructions(ctx context.Context, lib string, call func(int) []any, name string) (float64, error) {
	dir, err := os.MkdirTemp("", "otpguard-callgrind-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	fail := func(err error) (float64, error) {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		return 0, fmt.Errorf("%w\n%s", err, log)
	}
	// (a minute: valgrind starts slowly; a port taken before the bind is
	// picked again)
	p, ports, err := testutil.StartOnFreePorts(1, time.Minute, func(ports []int) *exec.Cmd {
		cmd := exec.Command("valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file="+out,
			"redis-server", "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		cmd.Stdout, cmd.Stderr = logf, logf
		return cmd
	})
	if err != nil {
		return fail(fmt.Errorf("redis-server under valgrind did not start: %w", err))
	}
	defer p.Stop() // (nothing to do once it has exited)
	cmd, port := p.Cmd, strconv.Itoa(ports[0])
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, MaxRetries: -1})
	defer c.Close()
	if lib != "" {
		if err := c.FunctionLoad(ctx, lib).Err(); err != nil {
			return fail(err)
		}
	} else if _, err := newGuard(ctx, c, allowedRules); err != nil { // loads the guard's library (Preload)
		return fail(err)
	}
	calls := 0
	pipelined := func(n int) error {
		p := c.Pipeline()
		for i := range n {
			p.Do(ctx, call(calls)...)
			calls++
			if i%100 == 99 {
				if _, err := p.Exec(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := pipelined(instrWarm); err != nil { // warm: the library's caches, the keys
		return fail(err)
	}
	ctl := func(on string) error {
		if o, err := exec.Command("callgrind_control", "-i", on, strconv.Itoa(cmd.Process.Pid)).CombinedOutput(); err != nil {
			return fmt.Errorf("callgrind_control: %v: %s", err, o)
		}
		return nil
	}
	const n = instrCalls
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
	if err := p.Wait(); err != nil {
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

// callsHook keeps the arguments of every FCALL and EVALSHA.
type callsHook struct{ calls [][]any }

func (h *callsHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *callsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := strings.ToLower(cmd.Name()); n == "fcall" || n == "evalsha" {
			h.calls = append(h.calls, slices.Clone(cmd.Args()))
		}
		return next(ctx, cmd)
	}
}
func (h *callsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
