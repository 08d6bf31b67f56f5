package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// cacheable reports whether r's denials may be answered from the deny
// cache until their retry-after: only those time alone ends. Concurrency
// leases are released at any moment; a failure count drops when an
// attempt in flight succeeds; and a lockout, which an administrator may
// lift, is always asked of the store (a login is worth a round trip: the
// unblocked owner logs in at once, through any process).
func (r *rule) cacheable() bool {
	return r.spec.Enforce && !r.spec.Challenge && r.Algorithm != store.Concurrency && r.Count == CountRequests && r.Lockout == nil
}

// cached is the decision a cached denial of rules[i] (key k, entry e)
// answers: the store is not asked, the other rules are skipped. Its Rules
// are shared by the entry's answers to the same rules for up to
// sharedRulesFor (never written once answered), so an attacker's repeats
// allocate nothing; they are kept in one of two of the cache's
// sharedSlots slots, so that what the sharing keeps is bounded whatever
// the cache's size.
func (g *Guard) cached(rules []*rule, i int, k denyKey, e *denial, res Result, now time.Time) Decision {
	d := Decision{DeniedBy: rules[i].Name, RetryAfter: res.RetryAfter}
	slots := g.cache.slots(k)
	for _, slot := range slots {
		// the same list (an action's own, or one kept by match: the
		// pointer keeps it alive, so no other list can take its address)
		if s := slot.Load(); s != nil && s.e == e && s.first == &rules[0] && len(s.rules) == len(rules) && s.fresh(now) {
			d.Rules = s.rules
			return d
		}
	}
	d.Rules = make([]Result, len(rules))
	for j, r := range rules {
		d.Rules[j] = Result{Rule: r.Name, Mode: r.Mode, Allowed: true, Limit: r.Limit, Window: r.Window, Skipped: true}
	}
	d.Rules[i] = res
	if len(rules) > maxSharedRules {
		return d
	}
	// of its two slots, one that another entry's recent answers do not
	// hold (two hot entries rarely meet in both)
	slot := slots[0]
	if s := slot.Load(); s != nil && s.e != e && s.fresh(now) {
		slot = slots[1]
	}
	slot.Store(&sharedRules{e: e, first: &rules[0], at: now, rules: d.Rules})
	return d
}

// maxSharedRules bounds the lists whose Rules are shared, and so the
// memory the slots hold: at most sharedSlots × 16 Results (12 MiB).
const maxSharedRules = 16

// sharedRulesFor bounds how long a cached denial's Rules are shared: the
// denying rule's RetryAfter and ResetAfter in them are at most that much
// older than the Decision's RetryAfter.
const sharedRulesFor = 100 * time.Millisecond

// sharedRules are the Rules entry e answered at at to the rules starting
// at first.
type sharedRules struct {
	e     *denial
	first **rule
	at    time.Time
	rules []Result
}

// fresh reports whether s may still be shared at now.
func (s *sharedRules) fresh(now time.Time) bool {
	age := now.Sub(s.at)
	return age >= 0 && age < sharedRulesFor
}

// mirror tells the backstop what the store answered for the ops of the
// rules that fall back on it.
func (g *Guard) mirror(rules []*rule, at []int, ops []store.Op, res []store.OpResult) {
	if g.backstop == nil {
		return
	}
	var mo []store.Op
	var mr []store.OpResult
	for j, i := range at {
		if i >= 0 && rules[i].allow {
			op := ops[j]
			op.Extra = 0
			mo, mr = append(mo, op), append(mr, res[j])
		}
	}
	if len(mo) > 0 {
		g.backstop.Mirror(mo, mr)
	}
}

// fallback is the decision's results when the store failed: when every
// enforcing rule allows on store errors, the backstop decides them (one
// atomic batch, from the state the store last answered); otherwise the
// request is denied and nothing is counted.
func (g *Guard) fallback(ctx context.Context, rules []*rule, at []int, ops []store.Op) []store.OpResult {
	res := make([]store.OpResult, len(ops))
	for j := range res {
		res[j] = store.OpResult{Allowed: false, RetryAfter: time.Second}
	}
	var bo []store.Op
	var idx []int
	for j, i := range at {
		if i < 0 { // the device check: the backstop knows this process's revocations
			bo, idx = append(bo, ops[j]), append(idx, j)
			continue
		}
		r := rules[i]
		if r.spec.Enforce && !r.allow {
			return res // this rule denies on store errors: so does the request
		}
		if r.allow {
			op := ops[j]
			op.Extra = 0
			bo, idx = append(bo, op), append(idx, j)
		}
	}
	if len(bo) == 0 || g.backstop == nil || (len(bo) == 1 && at[idx[0]] < 0) {
		return res
	}
	br, err := g.do(ctx, g.backstop, bo)
	if err != nil {
		return res
	}
	for k, j := range idx {
		res[j] = br[k]
		if i := at[j]; i >= 0 && rules[i].spec.Challenge && rules[i].Algorithm == store.Distinct {
			// what the set held (an account's proven networks) is Redis's
			// alone: the backstop's copy cannot say a value was seen, so
			// the request is asked for its proof
			res[j] = store.OpResult{Challenged: true, Now: br[k].Now}
		}
	}
	return res
}

func (g *Guard) do(ctx context.Context, st store.Store, ops []store.Op) ([]store.OpResult, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	res, err := st.Do(ctx, ops)
	if err != nil {
		return nil, err
	}
	if len(res) != len(ops) {
		return nil, fmt.Errorf("%w: %d results for %d operations", store.ErrStoreUnavailable, len(res), len(ops))
	}
	if st == g.store && g.storeClk != nil && len(res) > 0 {
		// every answer of the store, a revocation's too (see store.Clock)
		g.storeClk.Observe(res[0].Now)
	}
	return res, nil
}
