// Package testutil holds the small helpers the tests of several packages
// and of the tests module share: a log buffer safe for concurrent writers,
// random secrets, free ports. It has no dependencies beyond the standard
// library.
package testutil

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"net"
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
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
