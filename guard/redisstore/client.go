package redisstore

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
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
		return redis.NewClient(opt), nil
	}
	copt := &redis.ClusterOptions{ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1}
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
	return redis.NewClusterClient(copt), nil
}

func atIf(b bool) string {
	if b {
		return "@"
	}
	return ""
}
