package redistest

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// A redis-server answering on the port is taken for the one started only
// when it is that process: another test's server on the same port is not.
func TestOnlyItsOwnProcessAnswersForAServer(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.answers(s.proc.Cmd.Process.Pid); err != nil {
		t.Fatalf("the server itself: %v", err)
	}
	if err := s.answers(os.Getpid()); !errors.Is(err, errTaken) {
		t.Fatalf("another process's server: %v, want errTaken", err)
	}
}

// A server that will not start says why (a refused option is on its
// stderr, not in its log file) and leaves no folder behind.
func TestAServerThatWillNotStartSaysWhyAndLeavesNothing(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	_, err := Start("--no-such-option", "x")
	if err == nil || !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("%v, want the refused option named", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}
