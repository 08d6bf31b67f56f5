package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The double behaves as the service does where it differs from a
// permissive Redis; each property is checked here, on a client that logs
// in as the functions' user.
func TestServerlessDouble(t *testing.T) {
	s, err := StartServerless(ServerlessOptions{
		AccessString:  "on ~og:* -@all +@read +@write +@scripting +@connection +time +cluster|slots +command -@dangerous",
		NoScriptEvery: 3, Skew: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Username: s.User, Password: s.Password})
	defer c.Close()

	// TIME outside scripts works (and shows the double's skew)...
	now, err := c.Time(ctx).Result()
	if err != nil || time.Until(now) < 59*time.Minute {
		t.Errorf("TIME outside a script: %v, %v", now, err)
	}
	// ...inside a script it is refused, with the service's words, and
	// pcall sees the refusal as an error it can catch.
	err = c.Eval(ctx, "return redis.call('TIME')", nil).Err()
	if err == nil || !strings.Contains(err.Error(), "This Redis command is not allowed from script") {
		t.Errorf("TIME inside a script: %v", err)
	}
	v, err := c.Eval(ctx, "local ok, t = pcall(redis.call, 'TIME') if ok then return 'time' end return 'refused'", nil).Result()
	if err != nil || v != "refused" {
		t.Errorf("pcall(redis.call, 'TIME') in a script: %v, %v", v, err)
	}
	// Other commands run in scripts.
	if v, err := c.Eval(ctx, "redis.call('SET', KEYS[1], 'x', 'PX', 1000) return redis.call('GET', KEYS[1])", []string{"og:{t}a"}).Result(); err != nil || v != "x" {
		t.Errorf("SET/GET in a script: %v, %v", v, err)
	}
	// FUNCTION and FCALL do not exist.
	if err := c.FunctionLoad(ctx, "#!lua name=x\nredis.register_function('f', function() return 1 end)").Err(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "unknown command") {
		t.Errorf("FUNCTION LOAD: %v", err)
	}
	// EVALSHA is answered NOSCRIPT now and then, with nothing run.
	sha, err := c.ScriptLoad(ctx, "return redis.call('INCR', KEYS[1])").Result()
	if err != nil {
		t.Fatal(err)
	}
	noscript := 0
	for range 9 {
		if err := c.EvalSha(ctx, sha, []string{"og:{t}n"}).Err(); err != nil {
			if !strings.HasPrefix(err.Error(), "NOSCRIPT") {
				t.Fatal(err)
			}
			noscript++
		}
	}
	admin := s.Admin()
	defer admin.Close()
	if n, _ := admin.Get(ctx, "og:{t}n").Int(); noscript != 3 || n != 6 {
		t.Errorf("9 EVALSHA: %d NOSCRIPT, the counter at %d; want 3 and 6", noscript, n)
	}
	// CLUSTER SLOTS: the endpoint owns every slot, with a replica on
	// another port.
	//lint:ignore SA1019 the double answers CLUSTER SLOTS, as go-redis's cluster client reads it
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil || len(slots) != 1 || slots[0].Start != 0 || slots[0].End != 16383 || len(slots[0].Nodes) != 2 ||
		slots[0].Nodes[0].Addr != s.Addr || slots[0].Nodes[1].Addr != s.ReplicaAddr {
		t.Errorf("CLUSTER SLOTS: %+v, %v", slots, err)
	}
	// The user is the access string's: no FLUSHALL, keys outside og:*.
	if err := c.FlushAll(ctx).Err(); err == nil {
		t.Error("the functions' user may FLUSHALL")
	}
	if err := c.Set(ctx, "other", 1, 0).Err(); err == nil {
		t.Error("the functions' user may write outside og:*")
	}
	d, err := s.Denials(ctx)
	if err != nil || len(d) < 2 {
		t.Errorf("ACL log: %v, %v", d, err)
	}
	// The default user cannot log in.
	def := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer def.Close()
	if err := def.Ping(ctx).Err(); err == nil {
		t.Error("the default user answers")
	}
	// A failed login is not one of the user's commands refused (a client
	// of another double may reach this port): Denials leaves it out.
	wrong := redis.NewClient(&redis.Options{Addr: s.Addr, Username: s.User, Password: "not-this-double", Protocol: 2, MaxRetries: -1})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil {
		t.Error("a wrong password logs in")
	}
	if d2, err := s.Denials(ctx); err != nil || len(d2) != len(d) {
		t.Errorf("after a failed login the ACL log's refusals are %v (%v), were %v", d2, err, d)
	}
}
