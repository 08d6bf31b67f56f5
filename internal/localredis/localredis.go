// Package localredis is the embedded Redis of `make run`, of tests and of
// the traffic simulator: an in-process miniredis on a loopback port, with a
// clock the caller may set. It runs the same Lua library as a real server
// (as EVALSHA scripts: miniredis has no functions). Lambda builds never
// link it.
package localredis

import (
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is an in-process Redis and a client of it.
type Server struct {
	*miniredis.Miniredis
	client *redis.Client
	stop   chan struct{}
	done   sync.WaitGroup
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

// RealTime makes keys expire as time passes (miniredis moves its TTLs
// only when told): every 50ms the TTLs move on by the time elapsed. The
// server of make run needs it (without it, a window kept in a key with a
// TTL never ended); tests and the simulator, which set the clock
// themselves, do not call it.
func (s *Server) RealTime() {
	if s.stop != nil {
		return
	}
	s.stop = make(chan struct{})
	s.done.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-s.stop:
				return
			case now := <-t.C:
				s.FastForward(now.Sub(last))
				last = now
			}
		}
	})
}

// Close stops the server and its client.
func (s *Server) Close() {
	if s.stop != nil {
		close(s.stop)
		s.done.Wait()
	}
	_ = s.client.Close()
	s.Miniredis.Close()
}
