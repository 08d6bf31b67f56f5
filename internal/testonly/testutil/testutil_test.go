package testutil

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary a server when asked (OTPGUARD_TESTUTIL_LISTEN
// set): it listens on those addresses (comma-separated) one after
// another, as a server binds its ports (OTPGUARD_TESTUTIL_GAP apart), or
// exits 3 when a bind is refused.
func TestMain(m *testing.M) {
	if addrs := os.Getenv("OTPGUARD_TESTUTIL_LISTEN"); addrs != "" {
		gap, _ := time.ParseDuration(os.Getenv("OTPGUARD_TESTUTIL_GAP"))
		for addr := range strings.SplitSeq(addrs, ",") {
			time.Sleep(gap)
			l, err := net.Listen("tcp", addr)
			if err != nil {
				os.Exit(3)
			}
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						os.Exit(4)
					}
					c.Close()
				}
			}()
		}
		select {}
	}
	os.Exit(m.Run())
}

// server is the test binary as a server on ports.
func server(ports []int) *exec.Cmd {
	addrs := make([]string, len(ports))
	for i, p := range ports {
		addrs[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "OTPGUARD_TESTUTIL_LISTEN="+strings.Join(addrs, ","))
	return cmd
}

// startedAgain checks that StartOnFreePorts gave up its first ports for
// new ones, and that the server it returned stays up and listens on them.
func startedAgain(t *testing.T, p *Started, ports []int, err error, tried [][]int) {
	t.Helper()
	if err != nil {
		t.Fatalf("not started: %v (tried %v)", err, tried)
	}
	defer p.Stop()
	if len(tried) != 2 || ports[1] == tried[0][1] {
		t.Fatalf("started on %v after trying %v; want a second try on new ports", ports, tried)
	}
	time.Sleep(500 * time.Millisecond)
	if p.Exited() {
		t.Fatal("the server it returned has exited")
	}
	for _, port := range ports {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
}

// A port another connection takes between the pick and the server's bind
// (here an outgoing connection bound to it, as another test's client
// would be given it by the kernel) makes the server exit; it is started
// again on new ports, and the first try is not mistaken for a server.
func TestStartOnFreePortsStartsAgainWhenTheBindIsRefused(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	var tried [][]int
	p, ports, err := StartOnFreePorts(2, 30*time.Second, func(ports []int) *exec.Cmd {
		tried = append(tried, ports)
		if len(tried) == 1 {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: ports[1]}}
			c, err := d.Dial("tcp", target.Addr().String())
			if err != nil {
				t.Fatalf("a connection from port %d: %v", ports[1], err)
			}
			t.Cleanup(func() { c.Close() })
		}
		return server(ports)
	})
	startedAgain(t, p, ports, err, tried)
}

// Another process listening on a port the server meant to bind answers
// the dial in its stead: the server, which binds its first port and,
// moments later, exits on that one, is not taken for started.
func TestStartOnFreePortsIsNotFooledByAnotherListener(t *testing.T) {
	var tried [][]int
	p, ports, err := StartOnFreePorts(2, 30*time.Second, func(ports []int) *exec.Cmd {
		tried = append(tried, ports)
		if len(tried) == 1 {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[1]))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		}
		cmd := server(ports)
		cmd.Env = append(cmd.Env, "OTPGUARD_TESTUTIL_GAP=30ms")
		return cmd
	})
	startedAgain(t, p, ports, err, tried)
}

// A server is started only once every one of its ports answers.
func TestStartOnFreePortsWaitsForEveryPort(t *testing.T) {
	p, ports, err := StartOnFreePorts(2, time.Second, func(ports []int) *exec.Cmd { return server(ports[:1]) })
	if err == nil {
		p.Stop()
		t.Fatalf("started on %v, of which only the first listens", ports)
	}
}

// A server that exits for another reason than a port is told with how it
// exited.
func TestStartOnFreePortsTellsHowTheServerExited(t *testing.T) {
	_, _, err := StartOnFreePorts(1, 30*time.Second, func(ports []int) *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "OTPGUARD_TESTUTIL_LISTEN=not an address")
		return cmd
	})
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("%v, want how it exited", err)
	}
}

// The ports picked are below the range outgoing connections take their
// local ports from, the offset one too.
func TestFreePortsAreBelowTheOutgoingRange(t *testing.T) {
	start := localPortRangeStart()
	for range 50 {
		p, err := FreePortWith(10000)
		if err != nil {
			t.Fatal(err)
		}
		if p < 1024 || p+10000 >= start {
			t.Fatalf("port %d (and %d) for a local range from %d", p, p+10000, start)
		}
	}
}
