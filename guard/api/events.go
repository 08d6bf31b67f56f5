package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/events"
	"github.com/otpguard/otpguard/guard/store"
)

// publish sends a security event, at most once per dedup key for ttl
// (across processes: the mark is in Redis). A store that cannot mark it
// lets it through: a duplicate is better than a lost lockout notice. A
// dedup key names its occurrence (a lockout by its end, a budget by its
// window), so what this process remembers of a mark, set here or by
// another process, never hides the next occurrence.
func (s *Server) publish(ctx context.Context, e events.Event, dedup string, ttl time.Duration) {
	if s.Events == nil {
		return
	}
	if dedup != "" && s.Blobs != nil {
		m := hmac.New(sha256.New, s.Guard.Derive("security events"))
		m.Write([]byte(e.DetailType + "\x00" + dedup))
		key := "og:{" + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16]) + "}:ev"
		now := time.Now()
		if until, ok := s.published.Load(key); ok && now.UnixNano() < until.(int64) {
			return // marked in Redis already, for longer still
		}
		ttl = max(ttl, time.Second)
		first, err := s.Blobs.Once(context.WithoutCancel(ctx), key, ttl)
		if err == nil {
			s.published.Store(key, now.Add(ttl).UnixNano())
			if s.stores.Add(1)%1024 == 0 { // forget what expired: the map stays as small as the live marks
				s.published.Range(func(k, v any) bool {
					if v.(int64) <= now.UnixNano() {
						s.published.Delete(k)
					}
					return true
				})
			}
			if !first {
				return
			}
		}
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), events.Deadline())
	defer cancel()
	if err := s.Events.Publish(pctx, e); err != nil {
		s.Log.WarnContext(ctx, "publish a security event", "detailType", e.DetailType, "err", err)
	}
}

// Publish sends a security event that is not a decision's (a config
// applied or rejected), at most once per dedup key for ttl.
func (s *Server) Publish(ctx context.Context, e events.Event, dedup string, ttl time.Duration) {
	s.publish(ctx, e, dedup, ttl)
}

// ruleSpec is the configured rule named name (nil if none).
func (s *Server) ruleSpec(name string) *guard.Rule {
	i := slices.IndexFunc(s.Config.Rules, func(r guard.Rule) bool { return r.Name == name })
	if i < 0 {
		return nil
	}
	return &s.Config.Rules[i]
}

// subjectOf is the fingerprint of a rule's key in subj: its dimensions'
// fingerprints, joined by '+' ("" for global).
func (s *Server) subjectOf(r *guard.Rule, subj guard.Subject) string {
	var parts []string
	for _, dim := range r.Key {
		if dim == "global" {
			continue
		}
		parts = append(parts, s.Guard.Fingerprint(dim, s.Guard.Value(dim, subj)))
	}
	return strings.Join(parts, "+")
}

// lockoutEvents publishes, for the results of a failure's settlement,
// Lockout Started for each rule that now locks its subject, and Lockout
// DoS Suspected when what is locked is an account (a rule keyed on the
// account, or on its device for the untrusted clients' shared bucket)
// whose failures came from many networks (a distinct-networks rule on
// the account that counts failures or requests, in decision d).
func (s *Server) lockoutEvents(ctx context.Context, req guard.Request, d guard.Decision, results []guard.Result) {
	for _, res := range results {
		if !res.Locked {
			continue
		}
		r := s.ruleSpec(res.Rule)
		if r == nil {
			continue
		}
		subject := s.subjectOf(r, req.Subject)
		locked := max(res.RetryAfter, time.Second)
		occurrence := r.Name + "\x00" + subject + "\x00" + strconv.FormatInt(res.LockedUntil.UnixMicro(), 10)
		s.publish(ctx, events.Event{DetailType: events.LockoutStarted, Detail: map[string]any{
			"action": req.Action, "rule": r.Name, "dimensions": r.Key, "subject": subject, "lockedForSeconds": seconds(locked),
		}}, occurrence, locked)
		account := slices.Equal(r.Key, []string{"account"}) || (slices.Equal(r.Key, []string{"device"}) && d.Device != guard.DeviceTrusted)
		if !account {
			continue
		}
		for _, o := range d.Rules {
			n := s.ruleSpec(o.Rule)
			if n == nil || n.Algorithm != store.Distinct || !slices.Equal(n.Key, []string{"account"}) || !network(n.Of) ||
				n.Count == guard.CountSuccesses || o.Skipped {
				continue // a set of proven networks says nothing of the failures'
			}
			if seen := n.Limit - o.Remaining; seen >= events.DoSNetworksMin {
				s.publish(ctx, events.Event{DetailType: events.LockoutDoS, Detail: map[string]any{
					"action": req.Action, "rule": r.Name, "subject": subject, "networks": seen, "networkRule": n.Name,
					"lockedForSeconds": seconds(locked),
				}}, occurrence, locked)
				break
			}
		}
	}
}

func network(dim string) bool {
	return dim == "ip" || dim == "asn" || strings.HasPrefix(dim, "ip/")
}

// budgetEvent publishes Budget Tripped when a global cap or an elastic
// budget denied decision d (once per rule and subject per retry period).
func (s *Server) budgetEvent(ctx context.Context, action string, req guard.Request, d guard.Decision) {
	if d.Allowed || d.DeniedBy == "" || d.StoreError != nil || d.At.IsZero() {
		return // (a denial the deny cache answered: the store's denial before it told)
	}
	r := s.ruleSpec(d.DeniedBy)
	if r == nil {
		return
	}
	kind := ""
	switch {
	case r.Elastic != nil:
		kind = "elastic"
	case slices.Equal(r.Key, []string{"global"}):
		kind = "global"
	default:
		return
	}
	subject := s.subjectOf(r, req.Subject)
	retry := max(d.RetryAfter, time.Second)
	// once per window of the rule (on the store's clock: every process
	// names the same one)
	slot := d.At.UnixMicro() / max(r.Window.Microseconds(), 1)
	s.publish(ctx, events.Event{DetailType: events.BudgetTripped, Detail: map[string]any{
		"action": action, "rule": r.Name, "kind": kind, "dimensions": r.Key, "subject": subject, "retryAfterSeconds": seconds(retry),
	}}, r.Name+"\x00"+subject+"\x00"+strconv.FormatInt(slot, 10), retry)
}
