package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewClient connects to REDIS_URL-style addresses: one redis:// or
// rediss:// URL for a single node, or a comma-separated list of node
// addresses (URLs or host:port) for a Redis Cluster. A single URL with the
// query parameter cluster=true is a cluster reached through one endpoint
// (ElastiCache Serverless). Deadlines come from the caller's context
// (ContextTimeoutEnabled), and connections are kept for reuse. Commands are
// never retried by the client (MaxRetries -1): go-redis would resend a
// script whose reply was lost, and the script may already have consumed.
// Nor does it announce itself (CLIENT SETINFO, which Redis < 7.2 lacks):
// the stack's cache user may run exactly the commands the store sends.
// It speaks RESP2 (Protocol 2: AUTH instead of HELLO, which every ACL
// user may send either way): with RESP3, go-redis looks for push
// notifications around every command, which nothing here uses (the
// unblock notices are plain SUBSCRIBE messages); about 8% of the local
// server's CPU per send.
//
// A cluster client knows only the masters: the slot map it reads (CLUSTER
// SLOTS, from the addresses given or a master it knows) is stripped of
// replicas, so no replica is ever dialed. ElastiCache Serverless
// advertises one on port 6380, which the stack's security groups keep
// closed: go-redis would otherwise ask it for the slot map and the command
// table now and then, and a decision would wait for its dial to time out.
func NewClient(addrs string) (redis.UniversalClient, error) {
	parts := strings.Split(addrs, ",")
	if len(parts) == 1 && !strings.Contains(parts[0], "cluster=") {
		opt, err := redis.ParseURL(strings.TrimSpace(parts[0]))
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		opt.DialTimeout = time.Second
		opt.MaxRetries = -1
		opt.DisableIdentity = true
		opt.Protocol = 2
		return redis.NewClient(opt), nil
	}
	copt := &redis.ClusterOptions{ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1, DisableIdentity: true, Protocol: 2}
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "redis://" + p
		}
		u, err := url.Parse(p)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("redis cluster node %q: not a host:port or URL", p)
		}
		opt, err := redis.ParseURL(u.Scheme + "://" + u.User.String() + atIf(u.User != nil) + u.Host)
		if err != nil {
			return nil, fmt.Errorf("redis cluster node %q: %w", p, err)
		}
		copt.Addrs = append(copt.Addrs, opt.Addr)
		copt.Username, copt.Password = opt.Username, opt.Password
		if u.Scheme == "rediss" {
			copt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	m := &masters{seeds: copt.Addrs, opt: copt}
	copt.ClusterSlots = m.slots
	return redis.NewClusterClient(copt), nil
}

func atIf(b bool) string {
	if b {
		return "@"
	}
	return ""
}

// masters reads the cluster's slot map for a cluster client and keeps
// only the masters: from the configured addresses first (the
// configuration endpoint of a managed cluster), then from the masters of
// the last map.
type masters struct {
	seeds []string
	opt   *redis.ClusterOptions
	mu    sync.Mutex
	known []string
	conns map[string]*redis.Client
}

func (m *masters) slots(ctx context.Context) ([]redis.ClusterSlot, error) {
	m.mu.Lock()
	addrs := append(shuffled(m.seeds), shuffled(m.known)...)
	m.mu.Unlock()
	var errs []error
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			continue
		}
		seen[a] = true
		// CLUSTER SLOTS, as go-redis's cluster client reads it itself
		// (CLUSTER SHARDS, its successor, is Redis 7 only).
		//lint:ignore SA1019 the slot map in the shape ClusterOptions.ClusterSlots returns
		slots, err := m.conn(a).ClusterSlots(ctx).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		var known []string
		for i := range slots {
			if len(slots[i].Nodes) > 1 {
				slots[i].Nodes = slots[i].Nodes[:1] // the master; never a replica
			}
			if len(slots[i].Nodes) == 1 {
				known = append(known, slots[i].Nodes[0].Addr)
			}
		}
		m.mu.Lock()
		m.known = known
		m.mu.Unlock()
		return slots, nil
	}
	return nil, fmt.Errorf("read the cluster's slot map: %w", errors.Join(errs...))
}

// conn is a one-connection client of addr for reading the slot map.
func (m *masters) conn(addr string) *redis.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.conns[addr]; c != nil {
		return c
	}
	if m.conns == nil {
		m.conns = map[string]*redis.Client{}
	}
	c := redis.NewClient(&redis.Options{Addr: addr, Username: m.opt.Username, Password: m.opt.Password, TLSConfig: m.opt.TLSConfig,
		DialTimeout: m.opt.DialTimeout, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 1, DisableIdentity: true, Protocol: 2})
	m.conns[addr] = c
	return c
}

func shuffled(s []string) []string {
	out := append([]string(nil), s...)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
