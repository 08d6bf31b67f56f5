// Package localredis is the embedded Redis of `make run`, of tests and of
// the traffic simulator: an in-process miniredis on a loopback port, with a
// clock the caller may set. It runs the same Lua library as a real server
// (as EVALSHA scripts: miniredis has no functions). Lambda builds never
// link it.
package localredis

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is an in-process Redis and a client of it.
type Server struct {
	*miniredis.Miniredis
	client *redis.Client
}

// Start starts an embedded Redis on a free loopback port.
func Start() (*Server, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("start embedded redis: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	return &Server{Miniredis: m, client: c}, nil
}

// Client returns a client of the server (deadlines from the context, no
// retries, as redisstore.NewClient builds them).
func (s *Server) Client() *redis.Client { return s.client }

// Close stops the server and its client.
func (s *Server) Close() {
	_ = s.client.Close()
	s.Miniredis.Close()
}
