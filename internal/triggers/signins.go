package triggers

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sign-ins between PreAuthentication and PostAuthentication.
//
// PreAuthentication counts an attempt as a failure on every login rule,
// those keyed on the client address a trusted backend passed (ip, ip/16,
// asn, [account, ip]) included; PostAuthentication must give back
// exactly that, yet Cognito passes it no client metadata and nothing that
// names the attempt. So each PreAuthentication keeps its attempt's receipt
// (guard.Receipt: rule names, keyed tags, times, units) in Redis,
// in a sorted set per user keyed by a keyed hash of the pool and the user
// name (never the name itself), scored by when it was kept, for
// signInTTL; PostAuthentication takes the newest and settles it.
//
// Concurrent attempts for one user make "the newest" ambiguous: an
// attacker's wrong password timed between the owner's PreAuthentication
// and PostAuthentication is newer than the owner's attempt. When other
// attempts were kept within signInWindow of the newest, PostAuthentication
// settles, of the newest, only the entries every one of them shares (the
// account's own rules, and the address's when they all came from one):
// whatever the interleaving, no attempt from another address is given
// back; the owner keeps at most that one attempt counted on the address's
// rules. Attempts identical to the newest (the same rules on the same
// tags: Cognito retrying a PreAuthentication that timed out, or the
// owner's own tries from one address) are settled with it, so a retry
// never counts twice. What remains: with MFA, PostAuthentication comes
// after the last challenge, up to the pool's AuthSessionValidity (3 to 15
// minutes) after PreAuthentication; an attacker's attempt kept in that
// span but more than signInWindow before the owner's PostAuthentication,
// and newer than the owner's attempt, is the newest and is settled
// instead of it (the attacker's one attempt given back, the owner's kept).
const (
	// signInTTL covers a sign-in from PreAuthentication to the end of its
	// MFA challenges (a pool's AuthSessionValidity is at most 15 minutes).
	signInTTL = 15 * time.Minute
	// signInWindow is how close to the newest attempt another must be to
	// make PostAuthentication unsure which one it follows: Cognito's
	// retries of a timed-out trigger (3 tries of 5 seconds), and a
	// password sign-in's own span, with room.
	signInWindow = 20 * time.Second
	// maxSignIns bounds the attempts kept per user (an attacker's stream
	// of wrong passwords keeps the newest only).
	maxSignIns = 32
)

// signIns keeps the attempt receipts of PreAuthentication until
// PostAuthentication settles them.
type signIns struct {
	rdb redis.UniversalClient
	key []byte // derived from the deployment secret: "cognito sign-ins"
	now func() time.Time
}

// setKey is the sorted set of user's attempts in pool.
func (s *signIns) setKey(pool, user string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(pool + "\x00" + user))
	return "og:{" + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16]) + "}:si"
}

// keep records an attempt's receipt ("" too: an attempt that took nothing
// to give back is still the newest, and PostAuthentication must not take
// an older one for it).
func (s *signIns) keep(ctx context.Context, pool, user, receipt string) error {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	var nonce [9]byte
	_, _ = rand.Read(nonce[:])
	key, now := s.setKey(pool, user), s.now()
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(now.Add(-signInTTL).UnixMilli(), 10))
		p.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMilli()), Member: base64.RawURLEncoding.EncodeToString(nonce[:]) + "|" + receipt})
		p.ZRemRangeByRank(ctx, key, 0, -(maxSignIns + 1))
		p.PExpire(ctx, key, signInTTL)
		return nil
	})
	return err
}

// attempt is one kept attempt.
type attempt struct {
	member  string // as kept: nonce|receipt
	receipt string
	at      int64 // ms
}

// entryKey names a receipt entry without its time and units: the rule,
// the subject's tag, and a distinct rule's member.
func entryKey(e string) string {
	f := strings.Split(e, ",")
	if len(f) < 4 {
		return e
	}
	return strings.Join(append(f[:2:2], f[4:]...), ",")
}

func entrySet(receipt string) []string {
	var out []string
	for _, e := range strings.Fields(receipt) {
		out = append(out, entryKey(e))
	}
	slices.Sort(out)
	return out
}

// take removes the attempts PostAuthentication settles and returns what
// to settle of them (see the comment at the top of this file).
func (s *signIns) take(ctx context.Context, pool, user string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	key, now := s.setKey(pool, user), s.now()
	zs, err := s.rdb.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{
		Min: strconv.FormatInt(now.Add(-signInTTL).UnixMilli(), 10), Max: "+inf", Count: maxSignIns}).Result()
	if err != nil || len(zs) == 0 {
		return nil, err
	}
	var near []attempt
	for _, z := range zs {
		m, _ := z.Member.(string)
		_, receipt, ok := strings.Cut(m, "|")
		at := int64(z.Score)
		if !ok || (len(near) > 0 && near[0].at-at > signInWindow.Milliseconds()) {
			break
		}
		near = append(near, attempt{m, receipt, at})
	}
	if len(near) == 0 {
		return nil, errors.New("triggers: an attempt kept in an unknown form")
	}
	newest := entrySet(near[0].receipt)
	// the entries every attempt near the newest shares
	shared := map[string]int{}
	for _, a := range near {
		for _, k := range slices.Compact(entrySet(a.receipt)) {
			shared[k]++
		}
	}
	var out []string
	for _, a := range near {
		if !slices.Equal(entrySet(a.receipt), newest) {
			continue // another attempt: it stays, counted
		}
		n, err := s.rdb.ZRem(ctx, key, a.member).Result()
		if err != nil {
			return out, err
		}
		if n == 0 {
			continue // another PostAuthentication settled it
		}
		var keep []string
		for _, e := range strings.Fields(a.receipt) {
			if shared[entryKey(e)] == len(near) {
				keep = append(keep, e)
			}
		}
		if len(keep) > 0 {
			out = append(out, strings.Join(keep, " "))
		}
	}
	return out, nil
}
