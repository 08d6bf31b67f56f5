// Package testutil holds the small helpers the tests of several packages
// and of the tests module share: a log buffer safe for concurrent writers,
// random secrets, free ports and servers started on them. It has no
// dependencies beyond the standard library.
package testutil

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Buffer is a bytes.Buffer safe for a server's goroutines writing and a
// test reading.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// WaitFor waits up to timeout for want to appear in what was written,
// and returns everything written so far.
func (s *Buffer) WaitFor(want string, timeout time.Duration) (string, bool) {
	deadline := time.Now().Add(timeout)
	for {
		out := s.String()
		if strings.Contains(out, want) {
			return out, true
		}
		if time.Now().After(deadline) {
			return out, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RandomSecret is 32 random bytes in base64: a GUARD_SECRET, or a
// GUARD_SIGNING_KEY seed.
func RandomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) { return FreePortWith(0) }

// FreePortWith returns a loopback TCP port p, free a moment ago, with
// p+offset free too (a Redis Cluster node's bus port). Both are below the
// range the kernel takes outgoing connections' local ports from, so that
// no connection of another test can take them before the server meant to
// listen on them binds them; StartOnFreePorts still starts a server that
// could not bind again on new ports.
func FreePortWith(offset int) (int, error) {
	lo, hi := 10000, localPortRangeStart()-offset
	for range 100 {
		p := lo + mrand.N(max(hi-lo, 1))
		if hi <= lo { // an unusual range: let the kernel pick
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, err
			}
			p = l.Addr().(*net.TCPAddr).Port
			l.Close()
		}
		if portsFree(p, p+offset) {
			return p, nil
		}
	}
	return 0, errors.New("testutil: no free loopback port")
}

// localPortRangeStart is the lowest local port of outgoing connections.
func localPortRangeStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil {
			return n
		}
	}
	return 32768
}

func portsFree(ports ...int) bool {
	for _, p := range ports {
		if p > 65535 {
			return false
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// CPUTime is this process's CPU time so far (user and system, getrusage):
// a benchmark's CPU per operation, which a busy machine inflates less
// than its wall time.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ErrExited is Listening's error when the process exited before it
// listened: a bind refused, most often.
var ErrExited = errors.New("the process exited before it listened")

// Started is a process a test started, waited on in the background so
// that its exit is seen at once: a port it could not bind is then an
// error at once, not a wait for a listener that will never come.
type Started struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error // Cmd.Wait's, once done is closed
}

// Start starts cmd.
func Start(cmd *exec.Cmd) (*Started, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Started{Cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Exited reports whether the process has exited.
func (p *Started) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit and returns how it exited (see
// exec.Cmd.Wait).
func (p *Started) Wait() error {
	<-p.done
	return p.err
}

// Stop kills the process (its whole group when it leads one) and waits
// for it.
func (p *Started) Stop() {
	if a := p.Cmd.SysProcAttr; a != nil && a.Setpgid {
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	} else {
		_ = p.Cmd.Process.Kill()
	}
	<-p.done
}

// Listening dials each of addrs until it accepts a connection, and fails
// with ErrExited (and how the process exited) when the process exits
// first, or when timeout passes.
func (p *Started) Listening(timeout time.Duration, addrs ...string) error {
	deadline := time.Now().Add(timeout)
	for _, addr := range addrs {
		for {
			if p.Exited() {
				return p.exited()
			}
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: nothing listened within %s: %w", addr, timeout, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Another process's listener on a port answers a dial as well: the
	// process, which could not bind it, exits within moments of trying
	// (a server binds its ports one after another, and a port it meets
	// taken ends it).
	select {
	case <-p.done:
		return p.exited()
	case <-time.After(settle):
		return nil
	}
}

// settle is how long a process must stay up once its ports answer.
const settle = 100 * time.Millisecond

func (p *Started) exited() error { return fmt.Errorf("%w (%v)", ErrExited, p.err) }

// StartOnFreePorts picks n loopback ports that were free a moment ago,
// starts the command build makes for them, and waits up to wait until it
// accepts connections on every one. A port can be taken between the pick
// and the process's bind (another test's server picked it too; a
// connection, where the outgoing range leaves no room below it): the
// process then exits, and it is started again on new ports, up to 5
// times.
func StartOnFreePorts(n int, wait time.Duration, build func(ports []int) *exec.Cmd) (*Started, []int, error) {
	var err error
	for range 5 {
		ports := make([]int, n)
		addrs := make([]string, n)
		for i := range ports {
			if ports[i], err = FreePort(); err != nil {
				return nil, nil, err
			}
			addrs[i] = "127.0.0.1:" + strconv.Itoa(ports[i])
		}
		var p *Started
		if p, err = Start(build(ports)); err != nil {
			return nil, nil, err
		}
		if err = p.Listening(wait, addrs...); err == nil {
			return p, ports, nil
		}
		p.Stop()
		if !errors.Is(err, ErrExited) {
			return nil, nil, err
		}
	}
	return nil, nil, err
}
