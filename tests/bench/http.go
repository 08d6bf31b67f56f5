package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// httpSends drives the built server's POST /v1/otp/send with 16
// connections, every request to a new address from a new client address
// (behind a trusted loopback proxy), so every one is allowed and sent (to
// the outbox, /dev/null): requests/s, p50, p99, and the server's CPU per
// request (from /proc). Beside it, round by round in turn, the same load
// on plainsend: a rate-limited send endpoint as commonly written
// (net/http, encoding/json, go-redis, one Redis round trip), so the
// send's figure has a plain endpoint's beside it, on the same machine in
// the same minutes.
func (b *bench) httpSends(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "otpguard-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addr, stop, err := b.startServer(dir, "{timeout: 1s}")
	if err != nil {
		return err
	}
	defer stop()
	guardPid := b.serverPid
	plainAddr, plainPid, stopPlain, err := b.startPlain(dir)
	if err != nil {
		return err
	}
	defer stopPlain()
	servers := []struct {
		name, url string
		pid       int
	}{
		{"otpguard (the built server)", "http://" + addr + "/v1/otp/send", guardPid},
		{"a plain endpoint (plainsend)", "http://" + plainAddr + "/v1/otp/send", plainPid},
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, MaxConnsPerHost: 16}, Timeout: 5 * time.Second}
	var n atomic.Int64
	sendTo := func(url string) decider {
		return func(ctx context.Context, _ int) (bool, error) {
			i := n.Add(1)
			body := fmt.Sprintf(`{"channel":"email","to":"h%d@example.com","purpose":"login"}`, i)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusAccepted, nil
		}
	}
	fmt.Printf("\nhttp: POST /v1/otp/send, 16 connections, every request allowed and sent (the built server: default rules, outbox to /dev/null), the two servers in turn\n\n")
	tw := newTable("server\trequests/s\tp50\tp99\tserver CPU µs/request\tallowed\t")
	rows := make([][]result, len(servers))
	cpus := make([][]float64, len(servers))
	for round := range *rounds {
		for k := range servers {
			i := (k + round) % len(servers) // each goes first in turn
			s := servers[i]
			r, cpu, err := httpRound(ctx, sendTo(s.url), s.pid)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			rows[i] = append(rows[i], r)
			cpus[i] = append(cpus[i], cpu)
		}
	}
	for i, s := range servers {
		k := medianIndex(rows[i])
		r := rows[i][k]
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%.0f\t%.0f%%\t\n", s.name, r.perSec, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), cpus[i][k], 100*r.allowed)
	}
	b.httpCPU = cpus[0][medianIndex(rows[0])]
	b.httpPlainCPU = cpus[1][medianIndex(rows[1])]
	return tw.Flush()
}

// httpRound is one round of send's load on the server of pid: a warm-up,
// then the load, the server's CPU counted from idle to idle (the messages
// still queued when the load stops are part of the sends' cost: their
// delivery is counted once the server is idle again).
func httpRound(ctx context.Context, send decider, pid int) (result, float64, error) {
	if _, _, _, err := load(ctx, send, 16, 300*time.Millisecond); err != nil {
		return result{}, 0, err
	}
	c0, err := idle(pid) // the warm-up's messages delivered
	if err != nil {
		return result{}, 0, err
	}
	lat, allowed, elapsed, err := load(ctx, send, 16, *duration)
	if err != nil {
		return result{}, 0, err
	}
	c1, err := idle(pid)
	if err != nil {
		return result{}, 0, err
	}
	slices.Sort(lat)
	r := result{perSec: float64(len(lat)) / elapsed.Seconds(), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100],
		allowed: float64(allowed) / float64(len(lat))}
	return r, float64((c1 - c0).Microseconds()) / float64(len(lat)), nil
}

// startServer builds cmd/otpguard into dir and runs it on a free
// loopback port (started again on another when the bind is refused)
// against the bench's redis-server, behind a trusted loopback proxy, its
// messages to /dev/null, with store (a YAML flow mapping) and env added;
// it returns once /healthz answers, with its address and the function
// that stops it.
func (b *bench) startServer(dir, store string, env ...string) (addr string, stop func(), err error) {
	bin := filepath.Join(dir, "otpguard")
	if err := goBuild("../..", bin, "./cmd/otpguard"); err != nil {
		return "", nil, err
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("network: {trustedProxies: [127.0.0.0/8]}\nstore: "+store+"\n"), 0o600); err != nil {
		return "", nil, err
	}
	addr, pid, stop, err := b.start(bin, append([]string{"GUARD_CONFIG=" + cfg,
		"GUARD_SECRET=bench-secret-0123456789abcdef", "GUARD_SIGNING_KEY=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"OUTBOX_PATH=/dev/null"}, env...))
	b.serverPid = pid
	return addr, stop, err
}

// startPlain builds plainsend into dir and runs it as startServer runs
// the product: its address, pid and the function that stops it.
func (b *bench) startPlain(dir string) (addr string, pid int, stop func(), err error) {
	bin := filepath.Join(dir, "plainsend")
	if err := goBuild(".", bin, "./plainsend"); err != nil {
		return "", 0, nil, err
	}
	return b.start(bin, nil)
}

// goBuild builds pkg, from the module at dir, into bin.
func goBuild(dir, bin, pkg string) error {
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	return nil
}

// start runs bin on a free loopback port (GUARD_ADDR) against the bench's
// redis-server (REDIS_URL), with env added, and returns once /healthz
// answers.
func (b *bench) start(bin string, env []string) (addr string, pid int, stop func(), err error) {
	p, ports, err := testutil.StartOnFreePorts(1, time.Minute, func(ports []int) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(append(os.Environ(), "GUARD_ADDR=127.0.0.1:"+strconv.Itoa(ports[0]), "REDIS_URL=redis://"+b.srv.Addr), env...)
		cmd.Stderr = io.Discard
		return cmd
	})
	if err != nil {
		return "", 0, nil, fmt.Errorf("%s did not start: %w", filepath.Base(bin), err)
	}
	addr = "127.0.0.1:" + strconv.Itoa(ports[0])
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if r, err := http.Get("http://" + addr + "/healthz"); err == nil {
			r.Body.Close()
			return addr, p.Cmd.Process.Pid, p.Stop, nil
		}
		if time.Now().After(deadline) || p.Exited() {
			p.Stop()
			return "", 0, nil, fmt.Errorf("%s did not answer /healthz", filepath.Base(bin))
		}
	}
}

// idle waits until process pid is idle (under 1 ms of CPU in 50 ms, or 30
// s have passed) and returns its CPU time then.
func idle(pid int) (time.Duration, error) {
	last, err := cpuTime(pid)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		now, err := cpuTime(pid)
		if err != nil {
			return 0, err
		}
		if now-last < time.Millisecond {
			return now, nil
		}
		last = now
	}
	return last, err
}

// cpuTime is a process's user and system CPU time so far.
func cpuTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name (which may hold spaces).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ
	return time.Duration(utime+stime) * time.Second / hz, nil
}
