package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
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
// "reason:object" (for example "command:time").
func (s *Serverless) Denials(ctx context.Context) ([]string, error) {
	admin := s.Admin()
	defer admin.Close()
	entries, err := admin.ACLLog(ctx, 1000).Result()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Username == s.User {
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

// transform turns the server's reply to a command into what the client
// gets; nil forwards it unchanged.
type transform func(v value) []byte

// serve relays one client connection to its own server connection,
// rewriting the commands and replies the double changes. Replies come
// back in command order; push messages (RESP3 pub/sub) pass through.
func (s *Serverless) serve(c net.Conn) {
	up, err := net.Dial("tcp", s.server.Addr)
	if err != nil {
		c.Close()
		return
	}
	s.track(c, true)
	s.track(up, true)
	defer func() {
		c.Close()
		up.Close()
		s.track(c, false)
		s.track(up, false)
	}()
	pending := make(chan transform, 1<<16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := bufio.NewReader(up)
		for {
			v, err := readValue(r)
			if err != nil {
				c.Close()
				return
			}
			out := v.raw
			if v.kind != '>' {
				if f := <-pending; f != nil {
					out = f(v)
				}
			}
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			break
		}
		out, f, reply := s.rewrite(args)
		if reply {
			pending <- f
		}
		if _, err := up.Write(out); err != nil {
			break
		}
	}
	up.Close()
	<-done
}

// rewrite returns what to send the server for a client's command, how to
// transform its reply, and whether a reply is expected (pub/sub
// subscriptions are answered with push messages only).
func (s *Serverless) rewrite(args []string) ([]byte, transform, bool) {
	if len(args) == 0 {
		return command("ping"), nil, true
	}
	switch name := strings.ToLower(args[0]); name {
	case "subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe":
		return command(args...), nil, false
	case "eval", "eval_ro":
		if len(args) > 1 {
			args[1] = prelude + args[1]
		}
	case "evalsha", "evalsha_ro":
		if n := s.opts.NoScriptEvery; n > 0 && s.evalshas.Add(1)%int64(n) == 0 {
			// Not run: a PING keeps the replies in order, and its PONG
			// becomes the NOSCRIPT.
			s.noscripts.Add(1)
			return command("ping"), func(value) []byte {
				return respError("NOSCRIPT No matching script. Please use EVAL.")
			}, true
		}
		if len(args) > 1 {
			if sha, ok := s.shas.Load(strings.ToLower(args[1])); ok {
				args[1] = sha.(string)
			}
		}
	case "script":
		if len(args) > 2 && strings.EqualFold(args[1], "load") {
			sum := sha1.Sum([]byte(args[2]))
			orig := hex.EncodeToString(sum[:])
			args[2] = prelude + args[2]
			return command(args...), func(v value) []byte {
				if v.kind != '$' || v.null {
					return v.raw
				}
				s.shas.Store(orig, v.str)
				return bulk(orig)
			}, true
		}
		if len(args) > 1 && strings.EqualFold(args[1], "flush") {
			s.shas.Clear()
		}
	case "time":
		return command(args...), s.skewTime, true
	case "cluster":
		if len(args) > 1 && strings.EqualFold(args[1], "slots") {
			return command(args...), s.slots, true
		}
	}
	return command(args...), nil, true
}

// skewTime adds the configured skew to a TIME answer, after the delay.
func (s *Serverless) skewTime(v value) []byte {
	if s.opts.TimeDelay > 0 {
		time.Sleep(s.opts.TimeDelay)
	}
	if s.opts.Skew == 0 || v.kind != '*' || len(v.elems) != 2 {
		return v.raw
	}
	sec, err1 := strconv.ParseInt(v.elems[0].str, 10, 64)
	us, err2 := strconv.ParseInt(v.elems[1].str, 10, 64)
	if err1 != nil || err2 != nil {
		return v.raw
	}
	t := sec*1_000_000 + us + s.opts.Skew.Microseconds()
	return []byte(fmt.Sprintf("*2\r\n%s%s", bulk(strconv.FormatInt(t/1_000_000, 10)), bulk(strconv.FormatInt(t%1_000_000, 10))))
}

// slots rewrites CLUSTER SLOTS as the service answers it: the endpoint
// owns every range, with a replica on the replica port.
func (s *Serverless) slots(v value) []byte {
	if v.kind != '*' {
		return v.raw
	}
	host, port, _ := net.SplitHostPort(s.Addr)
	rhost, rport, _ := net.SplitHostPort(s.ReplicaAddr)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(v.elems))
	for _, e := range v.elems {
		if len(e.elems) < 3 {
			return v.raw
		}
		id := "0000000000000000000000000000000000000000"
		if m := e.elems[2]; len(m.elems) >= 3 {
			id = m.elems[2].str
		}
		fmt.Fprintf(&b, "*4\r\n:%s\r\n:%s\r\n", e.elems[0].str, e.elems[1].str)
		fmt.Fprintf(&b, "*3\r\n%s:%s\r\n%s", bulk(host), port, bulk(id))
		fmt.Fprintf(&b, "*3\r\n%s:%s\r\n%s", bulk(rhost), rport, bulk(replicaID))
	}
	return []byte(b.String())
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
