// Command plainsend is a plain send endpoint, for the bench's http
// section: a rate-limited POST /v1/otp/send as a Go service is commonly
// written, and nothing more. It serves GUARD_ADDR with net/http, reads
// the JSON body with encoding/json, makes one Redis round trip with
// go-redis under a per-request timeout (one script that takes a fixed
// window on the destination, the client address and a global key, as
// the bench's raw-Lua floor does, and stores the code's hash when all
// three allow), and answers 202 with a small JSON body. There is no
// hashing of identifiers, no message, no queue and no log line: the
// product does all of those, so its figure beside this one is the price
// of them and of everything else a send does.
//
// It is not a lower bound of that work: an outside review did the same
// work for about half its CPU (an HTTP/1.1 server on the socket, a Redis
// connection per HTTP connection, no encoding/json, GOMAXPROCS=1).
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

const script = `
for i = 1, 3 do
  local n = redis.call('INCR', KEYS[i])
  if n == 1 then redis.call('PEXPIRE', KEYS[i], 3600000) end
  if n > 1000000000 then return 0 end
end
redis.call('SET', KEYS[4], ARGV[1], 'PX', 300000)
return 1`

func main() {
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	opt.Protocol, opt.PoolSize, opt.ContextTimeoutEnabled = 2, 64, true
	rdb := redis.NewClient(opt)
	take := redis.NewScript(script)
	http.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	http.HandleFunc("POST /v1/otp/send", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Channel, To, Purpose string }
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8192)).Decode(&in); err != nil || in.To == "" {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		var code [4]byte
		_, _ = rand.Read(code[:])
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		keys := []string{"f:d:" + in.To, "f:i:" + r.Header.Get("X-Forwarded-For"), "f:g", "f:c:" + in.To + ":" + in.Purpose}
		n, err := take.Run(ctx, rdb, keys, fmt.Sprintf("%x", code)).Int()
		switch {
		case err != nil:
			http.Error(w, `{"error":"store_unavailable"}`, http.StatusServiceUnavailable)
		case n != 1:
			http.Error(w, `{"error":"rate_limited"}`, http.StatusTooManyRequests)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"status":"pending"}`)
		}
	})
	log.Fatal(http.ListenAndServe(os.Getenv("GUARD_ADDR"), nil))
}
