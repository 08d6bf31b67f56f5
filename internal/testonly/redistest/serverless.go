package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Serverless is a double of ElastiCache Serverless built from a real
// redis-server, behaving as the service does where it differs from a
// permissive local Redis:
//
//   - cluster mode, every slot owned by one virtual node: the endpoint;
//   - CLUSTER SLOTS advertises a read replica on another port (6380 on
//     AWS), which the stack's security groups do not open: here a port
//     that accepts connections and never answers, and counts them;
//   - FUNCTION and FCALL do not exist, nor CONFIG, DEBUG, SAVE and the
//     other commands ElastiCache restricts (renamed away in redis-server);
//   - a script may not call TIME ("This Redis command is not allowed from
//     script"), while TIME outside scripts works;
//   - EVALSHA is answered NOSCRIPT now and then (the script cache of the
//     node behind the endpoint is not the one the client loaded into);
//   - the functions' user is created from an access string (the one
//     template.yaml gives the cache user), and the default user is off.
//
// The endpoint is a proxy in front of redis-server that makes the
// script-level and topology differences; the rest is redis-server itself.
type Serverless struct {
	// Addr is the cache endpoint (port 6379 on AWS).
	Addr string
	// ReplicaAddr is the replica CLUSTER SLOTS advertises.
	ReplicaAddr    string
	User, Password string

	server     *Server
	adminPass  string
	ln         net.Listener
	replica    net.Listener
	opts       ServerlessOptions
	replicaHit atomic.Int64
	evalshas   atomic.Int64
	noscripts  atomic.Int64
	shas       sync.Map // the client's SHA-1 of a script -> the server's (of the script as rewritten)
	mu         sync.Mutex
	conns      map[net.Conn]bool
	closed     atomic.Bool
}

// ServerlessOptions shape the double.
type ServerlessOptions struct {
	// AccessString is the ACL rules of the user the functions log in as,
	// as template.yaml's CacheUser has them ("on ~og:* -@all +..."). Required.
	AccessString string
	// NoScriptEvery answers NOSCRIPT to every n-th EVALSHA without running
	// it (0: never).
	NoScriptEvery int
	// Skew is added to what TIME answers: a cache whose clock is not the
	// test process's. Only the double's clients see it (scripts cannot read
	// TIME here anyway).
	Skew time.Duration
	// TimeDelay holds each TIME answer back this long: a slow network for
	// the clock's round trip.
	TimeDelay time.Duration
}

// restricted are the commands the service does not have: FUNCTION and
// FCALL (Serverless), and what ElastiCache restricts on every cache.
var restricted = []string{"FUNCTION", "FCALL", "FCALL_RO", "CONFIG", "DEBUG", "BGREWRITEAOF", "BGSAVE", "SAVE", "MIGRATE",
	"REPLICAOF", "SLAVEOF", "SHUTDOWN", "SYNC", "PSYNC"}

// timeRefused is what ElastiCache Serverless answers a script's TIME with.
const timeRefused = "ERR This Redis command is not allowed from script"

// prelude is prepended to every script the double runs: it shadows the
// script's redis table with one whose call and pcall refuse TIME, as the
// service does. (Redis 7 protects the global table; a local of the same
// name is what the script's own code then sees.)
var prelude = `local redis = setmetatable({call = function(c, ...) if type(c) == 'string' and string.lower(c) == 'time' then error({err = '` + timeRefused + `'}) end return redis.call(c, ...) end, pcall = function(c, ...) if type(c) == 'string' and string.lower(c) == 'time' then return {err = '` + timeRefused + `'} end return redis.pcall(c, ...) end}, {__index = redis}) `

// StartServerless starts the double.
func StartServerless(o ServerlessOptions) (*Serverless, error) {
	if o.AccessString == "" {
		return nil, errors.New("redistest: ServerlessOptions.AccessString is required")
	}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}
	for _, c := range restricted {
		args = append(args, "--rename-command", c, "")
	}
	srv, err := Start(args...)
	if err != nil {
		return nil, err
	}
	s := &Serverless{server: srv, opts: o, User: "otpguard", Password: "serverless-double-" + hexRand(8),
		adminPass: "admin-" + hexRand(8), conns: map[net.Conn]bool{}}
	if err := s.setup(); err != nil {
		srv.Close()
		return nil, err
	}
	if s.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		srv.Close()
		return nil, err
	}
	if s.replica, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		s.ln.Close()
		srv.Close()
		return nil, err
	}
	s.Addr, s.ReplicaAddr = s.ln.Addr().String(), s.replica.Addr().String()
	go s.acceptReplica()
	go s.accept()
	return s, nil
}

func hexRand(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// setup creates the users and hands every slot to the one node.
func (s *Serverless) setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: s.server.Addr})
	defer c.Close()
	steps := [][]any{
		{"acl", "setuser", "admin", "on", ">" + s.adminPass, "~*", "&*", "+@all"},
		append([]any{"acl", "setuser", s.User, "reset", ">" + s.Password}, fields(s.opts.AccessString)...),
		{"cluster", "addslotsrange", 0, 16383},
	}
	for _, st := range steps {
		if err := c.Do(ctx, st...).Err(); err != nil {
			return fmt.Errorf("redistest: %v: %w", st[:3], err)
		}
	}
	admin := s.Admin()
	defer admin.Close()
	// As template.yaml's default user: off, nothing allowed.
	if err := admin.Do(ctx, "acl", "setuser", "default", "off", "-@all").Err(); err != nil {
		return err
	}
	for {
		info, err := admin.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redistest: the serverless double's cluster did not settle: %v %s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fields(access string) []any {
	var out []any
	for _, f := range strings.Fields(access) {
		out = append(out, f)
	}
	return out
}

// URL is the REDIS_URL of the functions' user: one endpoint, cluster mode.
func (s *Serverless) URL() string {
	return "redis://" + url.UserPassword(s.User, s.Password).String() + "@" + s.Addr + "?cluster=true"
}

// URLWithoutPassword is the REDIS_URL as the stack sets it: the password
// comes from a secret (REDIS_PASSWORD_SECRET_ID).
func (s *Serverless) URLWithoutPassword() string {
	return "redis://" + s.User + "@" + s.Addr + "?cluster=true"
}

// Admin is a client of the redis-server behind the endpoint with every
// right: for the tests' own reads, FLUSHALL and the ACL log.
func (s *Serverless) Admin() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.server.Addr, Username: "admin", Password: s.adminPass, ContextTimeoutEnabled: true})
}

// ReplicaConnections is how many connections reached the advertised
// replica.
func (s *Serverless) ReplicaConnections() int64 { return s.replicaHit.Load() }

// NoScripts is how many EVALSHA the double answered NOSCRIPT.
func (s *Serverless) NoScripts() int64 { return s.noscripts.Load() }

// Denials returns the ACL log's refusals of the functions' user, as
// "reason:object" (for example "command:time"): the commands, keys and
// channels the user's access string refused. Failed logins ("auth") are
// left out: every double's user is named as the stack names it, with a
// password of its own, so a client of another double on this machine
// whose port this one took over since (tests run side by side) fails
// its AUTH or HELLO here; the functions' own logins failing fails their
// tests anyway.
func (s *Serverless) Denials(ctx context.Context) ([]string, error) {
	admin := s.Admin()
	defer admin.Close()
	entries, err := admin.ACLLog(ctx, 1000).Result()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Username == s.User && e.Reason != "auth" {
			out = append(out, e.Reason+":"+e.Object)
		}
	}
	return out, nil
}

// Close stops the proxy, the replica port and redis-server.
func (s *Serverless) Close() {
	s.closed.Store(true)
	s.ln.Close()
	s.replica.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.server.Close()
}

func (s *Serverless) track(c net.Conn, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.conns[c] = true
	} else {
		delete(s.conns, c)
	}
}

// acceptReplica takes connections to the replica port and never answers:
// what a client sees of a port a security group drops, until its timeout.
func (s *Serverless) acceptReplica() {
	for {
		c, err := s.replica.Accept()
		if err != nil {
			return
		}
		s.replicaHit.Add(1)
		s.track(c, true)
		go func() {
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					c.Close()
					s.track(c, false)
					return
				}
			}
		}()
	}
}

func (s *Serverless) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.serve(c)
	}
}

const replicaID = "5e7e71e55d0b1e0000000000000000000000ca5e"

// accessString matches the CacheUser's AccessString in template.yaml.
var accessString = regexp.MustCompile(`(?s)CacheUser:.*?AccessString:\s*"([^"]+)"`)

// TemplateAccessString reads the access string template.yaml gives the
// cache user the functions log in as.
func TemplateAccessString(templatePath string) (string, error) {
	raw, err := os.ReadFile(templatePath)
	if err != nil {
		return "", err
	}
	m := accessString.FindSubmatch(raw)
	if m == nil {
		return "", fmt.Errorf("redistest: no CacheUser AccessString in %s", templatePath)
	}
	return string(m[1]), nil
}
