// Package e2e drives the real otpguard program (the binary `make run`
// runs) over HTTP against a real redis-server and a real Redis Cluster.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/testonly/redistest"
	"github.com/otpguard/otpguard/internal/testonly/testutil"
)

var (
	binary  string // the built cmd/otpguard
	single  *redistest.Server
	cluster *redistest.Cluster
	// double is ElastiCache Serverless as the stack creates it (see
	// redistest.Serverless); the server logs in as the stack's cache user.
	double *redistest.Serverless
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "otpguard-e2e-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		binary = filepath.Join(dir, "otpguard")
		if b := os.Getenv("E2E_BINARY"); b != "" {
			binary = b // another build of the server: to see a regression test fail on it
		} else if out, err := buildServer(binary); err != nil {
			fmt.Fprintf(os.Stderr, "build otpguard: %v\n%s", err, out)
			return 1
		}
		if single, err = redistest.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer single.Close()
		if cluster, err = redistest.StartCluster(3); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cluster.Close()
		access, err := redistest.TemplateAccessString("../../template.yaml")
		if err == nil {
			double, err = redistest.StartServerless(redistest.ServerlessOptions{AccessString: access, NoScriptEvery: 13})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer double.Close()
		code := m.Run()
		// Every scenario ran on the double as the stack's user: the ACL
		// refused nothing the server sent, and no replica was dialed.
		if d, err := double.Denials(context.Background()); err != nil || len(d) > 0 {
			fmt.Fprintf(os.Stderr, "the stack's cache user was refused on the Serverless double: %v %v\n", d, err)
			code = 1
		}
		if n := double.ReplicaConnections(); n > 0 {
			fmt.Fprintf(os.Stderr, "the Serverless double's replica port was dialed %d times\n", n)
			code = 1
		}
		return code
	}())
}

// buildServer builds cmd/otpguard in the product module (its own go.mod
// and versions, not this test module's), as `make run` builds it.
func buildServer(out string) ([]byte, error) {
	cmd := exec.Command("go", "build", "-o", out, "./cmd/otpguard")
	cmd.Dir = "../.."
	return cmd.CombinedOutput()
}

// backend is a Redis the server runs against.
type backend struct {
	name     string
	redisURL string
	client   func() redis.UniversalClient
}

// backends are plain redis-server, a 3-master Redis Cluster, and the
// ElastiCache Serverless double (whose client here is an administrator's,
// for the tests' own reads: the server logs in as the stack's user).
func backends() []backend {
	return []backend{
		{"redis", "redis://" + single.Addr, func() redis.UniversalClient { return single.Client() }},
		{"cluster", strings.Join(cluster.Addrs(), ","), func() redis.UniversalClient { return cluster.Client() }},
		{"serverless", double.URL(), func() redis.UniversalClient { return double.Admin() }},
	}
}

// server is one running otpguard process.
type server struct {
	environ []string
	url     string
	outbox  string
	cmd     *exec.Cmd
	logs    *testutil.Buffer
	http    *http.Client
}

// start runs the program with REDIS_URL redisURL, an outbox file and, when
// config is not empty, that GUARD_CONFIG document; extra is more
// environment (NAME=value). It is stopped at the end of the test. Unless
// extra sets them, every start has its own random GUARD_SECRET and
// GUARD_SIGNING_KEY, so its counters start empty even on a shared Redis.
func start(t *testing.T, redisURL, config string, extra ...string) *server {
	t.Helper()
	dir := t.TempDir()
	s := &server{outbox: filepath.Join(dir, "outbox.jsonl"), logs: &testutil.Buffer{}, http: &http.Client{Timeout: 10 * time.Second}}
	// DELIVERY_MODE direct unless a test asks for the queue (`make run`'s
	// default): a test that reads the newest code of an address right
	// after its send reads it written (queue_test.go tests the queue)
	env := append(os.Environ(), "GUARD_ADDR=127.0.0.1:0", "OUTBOX_PATH="+s.outbox, "DELIVERY_MODE=direct")
	if redisURL != "" {
		env = append(env, "REDIS_URL="+redisURL, "GUARD_SECRET="+testutil.RandomSecret(), "GUARD_SIGNING_KEY="+testutil.RandomSecret())
	}
	env = append(env, extra...)
	s.environ = env
	if config != "" && !strings.Contains(config, "store:") {
		// a functional test: not about the store's latency (see loaded)
		config = strings.TrimRight(config, "\n") + "\n" + loaded
	}
	if config != "" {
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, "GUARD_CONFIG="+path)
	}
	s.cmd = exec.Command(binary)
	s.cmd.Env = env
	s.cmd.Stderr = s.logs
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Connections the client dialed but never used would hold the
		// server's graceful shutdown for 5s.
		s.http.CloseIdleConnections()
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if after, ok := strings.CutPrefix(sc.Text(), "otpguard listening on "); ok {
				lines <- after
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case s.url = <-lines:
	case <-time.After(60 * time.Second): // a busy machine starts a process slowly
		t.Fatalf("otpguard did not start; its logs:\n%s", s.logs.String())
	}
	return s
}

// env returns the value the server was started with for name.
func (s *server) env(name string) string {
	for _, kv := range slices.Backward(s.environ) {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// reply is an HTTP answer, its body decoded.
type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
	took   time.Duration
}

func (r reply) str(k string) string { s, _ := r.body[k].(string); return s }

func (s *server) do(t *testing.T, method, path, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	began := time.Now()
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw), took: time.Since(began)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (s *server) post(t *testing.T, path string, v any, header ...string) reply {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return s.do(t, http.MethodPost, path, string(b), header...)
}

func (s *server) send(t *testing.T, channel, to, purpose string, header ...string) reply {
	t.Helper()
	return s.post(t, "/v1/otp/send", map[string]string{"channel": channel, "to": to, "purpose": purpose}, header...)
}

func (s *server) verify(t *testing.T, to, purpose, code string) reply {
	t.Helper()
	return s.post(t, "/v1/otp/verify", map[string]string{"to": to, "purpose": purpose, "code": code})
}

// outboxLine is one message the local outbox wrote.
type outboxLine struct {
	Channel, To, Purpose, Code, Body string
	SentAt                           time.Time
}

func (s *server) messages(t *testing.T) []outboxLine {
	t.Helper()
	raw, err := os.ReadFile(s.outbox)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []outboxLine
	for line := range strings.Lines(string(raw)) {
		var l outboxLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("outbox line %q: %v", line, err)
		}
		out = append(out, l)
	}
	return out
}

// lastCode is the code of the last message to to, waiting up to 30s for
// one (a message may be written after the answer that caused it).
func (s *server) lastCode(t *testing.T, to string) string {
	t.Helper()
	var msgs []outboxLine
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		msgs = s.messages(t)
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].To == to {
				return msgs[i].Code
			}
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("no message to %s in the outbox after 30s (%d messages)", to, len(msgs))
	return ""
}

// loaded is the store of tests that are not about the store's latency
// (every test with a config of its own, unless it sets store): the
// default store.timeout (50ms) lets the backstop decide, or a send fail,
// when a busy machine delays a Redis answer. The fault tests, which are
// about that bound, start with no config and keep it.
const loaded = "store: {timeout: 10s}\n"

// eachMaster runs fn on every master node of rdb (the node itself for a
// single server), one after the other.
func eachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(*redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return fn(n)
		})
	case *redis.Client:
		return fn(c)
	}
	return fmt.Errorf("unsupported client %T", rdb)
}

// dump returns every key of every master with its value in readable form.
func dump(t *testing.T, rdb redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	err := eachMaster(ctx, rdb, func(c *redis.Client) error {
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			typ, _ := c.Type(ctx, k).Result()
			var v any
			switch typ {
			case "string":
				v, err = c.Get(ctx, k).Result()
			case "hash":
				v, err = c.HGetAll(ctx, k).Result()
			case "zset":
				v, err = c.ZRangeWithScores(ctx, k, 0, -1).Result()
			case "list":
				v, err = c.LRange(ctx, k, 0, -1).Result()
			case "set":
				v, err = c.SMembers(ctx, k).Result()
			default:
				v = "<" + typ + ">"
			}
			if err != nil && err != redis.Nil {
				return err
			}
			out[k] = fmt.Sprint(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func flush(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	if err := eachMaster(ctx, rdb, func(c *redis.Client) error { return c.FlushAll(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
}
