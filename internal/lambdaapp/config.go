package lambdaapp

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// sharedConfig reads the config document through Redis, so that SSM
// Parameter Store sees one read per stack per CONFIG_REFRESH whatever
// the number of containers (its default throughput is 40 reads a second
// per account and region; a thousand containers each reading it every
// minute, plus their cold starts, would be throttled).
//
// Two keys per parameter: og:{cfg:<hash>} holds the last document read
// from SSM (a day's TTL, so that a short SSM outage changes nothing), and
// og:{cfg:<hash>}:fresh, set with NX for one period, marks that some
// container has read SSM within the period. The container whose SET NX
// succeeds reads SSM and writes the document; the others read it from
// Redis (at a stack's very first start, they wait up to a second for
// the first document to be written). No container's clock is
// compared with another's: Redis's TTL decides.
//
// The document is not secret and is read by anyone who can read Redis;
// someone who can write Redis can rewrite it, but could as well delete
// every counter, so it is not signed.
type sharedConfig struct {
	rdb        redis.UniversalClient
	param      string
	key, fresh string
	ssm        *parameters
	refresh    time.Duration
	log        *slog.Logger
}

// cachedDoc is the value of og:{cfg:<hash>}.
type cachedDoc struct {
	Param string `json:"param"`
	Doc   string `json:"doc"`
	Found bool   `json:"found"`
}

func newSharedConfig(rdb redis.UniversalClient, param string, ssm *parameters, refresh time.Duration, log *slog.Logger) *sharedConfig {
	sum := sha256.Sum256([]byte(param))
	tag := "og:{cfg:" + base64.RawURLEncoding.EncodeToString(sum[:12]) + "}"
	return &sharedConfig{rdb: rdb, param: param, key: tag, fresh: tag + ":fresh", ssm: ssm, refresh: refresh, log: log}
}

// read returns the document and whether the parameter exists.
func (c *sharedConfig) read(ctx context.Context) (doc string, found bool, err error) {
	cached, cerr := c.cached(ctx)
	mine, ferr := c.rdb.SetNX(ctx, c.fresh, 1, c.refresh).Result()
	if ferr == nil && !mine && cerr != nil {
		// Another container is reading SSM and has not written the
		// document yet (a stack's first start): wait for it a little.
		for i := 0; i < 20 && cerr != nil && ctx.Err() == nil; i++ {
			time.Sleep(50 * time.Millisecond)
			cached, cerr = c.cached(ctx)
		}
	}
	if cerr == nil && ferr == nil && !mine {
		return cached.Doc, cached.Found, nil
	}
	// Ours to read (or Redis does not answer, or holds nothing yet).
	doc, found, err = c.ssm.get(ctx, c.param)
	if err != nil {
		if cerr == nil {
			c.log.WarnContext(ctx, "the config parameter cannot be read; the document last read stays", "err", err)
			return cached.Doc, cached.Found, nil
		}
		return "", false, err
	}
	v, _ := json.Marshal(cachedDoc{Param: c.param, Doc: doc, Found: found})
	if err := c.rdb.Set(ctx, c.key, v, 24*time.Hour).Err(); err != nil {
		c.log.WarnContext(ctx, "the config could not be shared through Redis", "err", err)
	}
	return doc, found, nil
}

var errNoCache = errors.New("no shared config")

func (c *sharedConfig) cached(ctx context.Context) (cachedDoc, error) {
	raw, err := c.rdb.Get(ctx, c.key).Bytes()
	if err != nil {
		return cachedDoc{}, err
	}
	var d cachedDoc
	if err := json.Unmarshal(raw, &d); err != nil || d.Param != c.param {
		return cachedDoc{}, errNoCache
	}
	return d, nil
}
