package testutil

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestMain makes the test binary a server when asked (OTPGUARD_TESTUTIL_LISTEN
// set): it listens on that address, or exits 3 when the bind is refused.
func TestMain(m *testing.M) {
	if addr := os.Getenv("OTPGUARD_TESTUTIL_LISTEN"); addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			os.Exit(3)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(4)
			}
			c.Close()
		}
	}
	os.Exit(m.Run())
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
	p, ports, err := StartOnFreePorts(2, 1, 30*time.Second, func(ports []int) *exec.Cmd {
		tried = append(tried, ports)
		if len(tried) == 1 {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: ports[1]}}
			c, err := d.Dial("tcp", target.Addr().String())
			if err != nil {
				t.Fatalf("a connection from port %d: %v", ports[1], err)
			}
			t.Cleanup(func() { c.Close() })
		}
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "OTPGUARD_TESTUTIL_LISTEN=127.0.0.1:"+strconv.Itoa(ports[1]))
		return cmd
	})
	if err != nil {
		t.Fatalf("not started: %v (tried %v)", err, tried)
	}
	defer p.Stop()
	if len(tried) != 2 || ports[1] == tried[0][1] {
		t.Fatalf("started on %v after trying %v; want a second try on new ports", ports, tried)
	}
	if p.Exited() {
		t.Fatal("the server it returned has exited")
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(ports[1]), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
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
