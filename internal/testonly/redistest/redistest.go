// Package redistest starts real redis-server processes for tests: a single
// node, or a Redis Cluster of masters, on free loopback ports. It never
// skips: a missing redis-server is an error (make test installs it).
package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

// Server is one running redis-server.
type Server struct {
	Addr string
	Port int
	dir  string
	args []string
	bus  bool // a cluster node: it listens on Port+10000 too
	proc *testutil.Started
}

// Start runs a redis-server on a free loopback port, without persistence,
// its files in a new temporary folder. A port taken between the pick and
// the server's bind (another test's server picked it too) is picked
// again.
func Start(extra ...string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redistest: redis-server is not installed; `make test` installs it (apt-get install redis-server)")
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	bus := false
	for i := range len(extra) - 1 {
		bus = bus || extra[i] == "--cluster-enabled" && extra[i+1] == "yes"
	}
	for range 5 {
		var port int
		if port, err = testutil.FreePortWith(10000); err != nil { // and its cluster bus port
			break
		}
		s := &Server{Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, bus: bus}
		s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log")}, extra...)
		if err = s.Restart(); err == nil {
			return s, nil
		}
		if !errors.Is(err, testutil.ErrExited) && !errors.Is(err, errTaken) {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// errTaken is Restart's error when what answers on the port is not the
// server it started: another process holds the port, and the server,
// which could not bind it, is on its way out.
var errTaken = errors.New("another process answers on the port")

// Restart starts the server again after Stop, on the same port.
func (s *Server) Restart() error {
	cmd := exec.Command("redis-server", s.args...)
	var stderr testutil.Buffer // a refused option is told here, not in the log file
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	p, err := testutil.Start(cmd)
	if err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	addrs := []string{s.Addr}
	if s.bus {
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(s.Port+10000))
	}
	// (30s: a busy machine starts a process slowly)
	if err = p.Listening(30*time.Second, addrs...); err == nil {
		err = s.answers(p.Cmd.Process.Pid)
	}
	if err != nil {
		p.Stop()
		return fmt.Errorf("redistest: redis-server on %s did not start: %w\n%s%s", s.Addr, err, stderr.String(), readLog(s.dir))
	}
	s.proc = p
	return nil
}

// answers checks that the server answering on s.Addr is the process pid.
func (s *Server) answers(pid int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("%w: %v", errTaken, err)
	}
	if !strings.Contains(info, "\nprocess_id:"+strconv.Itoa(pid)+"\r") {
		return errTaken
	}
	return nil
}

func readLog(dir string) []byte {
	log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
	return log
}

// Stop kills the server (it can be restarted).
func (s *Server) Stop() {
	if s.proc != nil {
		s.proc.Stop()
		s.proc = nil
	}
}

// Close stops the server and removes its files.
func (s *Server) Close() {
	s.Stop()
	_ = os.RemoveAll(s.dir)
}

// Client returns a go-redis client for the server.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
}

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts n masters and joins them into one cluster with every
// slot covered.
func StartCluster(n int) (*Cluster, error) { return StartClusterWithReplicas(n, 0) }

// StartClusterWithReplicas starts n masters with r replicas each (n×(1+r)
// nodes) and joins them into one cluster with every slot covered; a
// master that dies is replaced by its replica after the node timeout (2s).
func StartClusterWithReplicas(n, r int) (*Cluster, error) {
	c := &Cluster{}
	total := n * (1 + r)
	for range total {
		s, err := Start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(r), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range c.Nodes {
		rdb := s.Client()
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(total)) {
				break
			}
			if time.Now().After(deadline) {
				rdb.Close()
				c.Close()
				return nil, fmt.Errorf("redistest: cluster did not settle: %v %s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rdb.Close()
	}
	return c, nil
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, s := range c.Nodes {
		a = append(a, s.Addr)
	}
	return a
}

// Client returns a go-redis cluster client.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
}

// Close stops every node.
func (c *Cluster) Close() {
	for _, s := range c.Nodes {
		s.Close()
	}
}

// KeysWithoutTTL returns the keys matching pattern that have no TTL, on
// every master of rdb.
func KeysWithoutTTL(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	var bad []string
	check := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			ttl, err := c.PTTL(ctx, it.Val()).Result()
			if err != nil {
				return err
			}
			if ttl == -1 {
				bad = append(bad, it.Val())
			}
		}
		return it.Err()
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		mu := make(chan struct{}, 1) // ForEachMaster runs the nodes in parallel
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu <- struct{}{}
			defer func() { <-mu }()
			return check(ctx, n)
		})
		return bad, err
	case *redis.Client:
		err := check(ctx, c)
		return bad, err
	}
	return nil, fmt.Errorf("redistest: unsupported client %T", rdb)
}

// RoundTrips is a go-redis hook that counts round trips to one client:
// each command or pipeline sent, leaving out the handshake of a new
// connection (HELLO, CLIENT SETINFO, AUTH).
type RoundTrips struct{ N *atomic.Int64 }

func handshake(name string) bool { return name == "hello" || name == "client" || name == "auth" }

// DialHook passes dials through uncounted.
func (h RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command.
func (h RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd.Name()) {
			h.N.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts one pipeline.
func (h RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0].Name()) {
			h.N.Add(1)
		}
		return next(ctx, cmds)
	}
}
