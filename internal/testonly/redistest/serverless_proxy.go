package redistest

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// transform turns the server's reply to a command into what the client
// gets; nil forwards it unchanged.
type transform func(v value) []byte

// serve relays one client connection to its own server connection,
// rewriting the commands and replies the double changes. Replies come
// back in command order; pub/sub messages pass through: RESP3 push
// messages, and on a connection that subscribed, RESP2's arrays of the
// same (a subscription's confirmations and messages).
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
	var subscribed atomic.Bool
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
			if v.kind != '>' && !(subscribed.Load() && pubSubFrame(v)) {
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
		if isSubscribe(args) {
			subscribed.Store(true)
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

func isSubscribe(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch strings.ToLower(args[0]) {
	case "subscribe", "psubscribe", "ssubscribe":
		return true
	}
	return false
}

// pubSubFrame reports a RESP2 pub/sub frame: an array whose first element
// names a subscription's confirmation or a message.
func pubSubFrame(v value) bool {
	if v.kind != '*' || len(v.elems) < 3 {
		return false
	}
	switch v.elems[0].str {
	case "message", "pmessage", "smessage", "subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe":
		return true
	}
	return false
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
