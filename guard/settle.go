package guard

import (
	"context"
	"fmt"
	"slices"

	"github.com/otpguard/otpguard/guard/store"
)

// Settle reports how an attempt that d admitted ended (see [Outcome]).
// Pass the zero Decision when the decision is not at hand (the internal
// outcomes route): the store then assumes every rule counted the attempt
// in its current window. Settle's own deadline is the store timeout, not
// the caller's: give it a context that outlives the request (a client that
// hangs up must not keep a success from giving its attempt back).
func (g *Guard) Settle(ctx context.Context, req Request, d Decision, outcome Outcome) ([]Result, error) {
	s := req.Subject
	s.device = "" // without the decision, the device counts as untrusted
	rules := g.match(req, true)
	tags, err := g.tags(rules, s)
	if err != nil {
		return nil, err
	}
	var settled []*rule
	var ops []store.Op
	for i, r := range rules {
		res, known := Result{taken: 1, at: d.At, tag: tags[i]}, d.Rules != nil
		if known {
			k := slices.IndexFunc(d.Rules, func(x Result) bool { return x.Rule == r.Name })
			if k < 0 || !d.Allowed {
				continue
			}
			res = d.Rules[k]
			if res.tag == "" {
				res.tag = tags[i]
			}
			if res.Leased {
				if outcome == Void {
					g.leases.give(r.spec.ID+res.tag, 1)
				}
				continue
			}
		} else if r.filtersDevice && !r.onUntrusted {
			continue // it applied to trusted devices only
		} else if r.Algorithm == store.SlidingLog {
			res.taken = 0 // its entry is named at admission, unknown here
		}
		kind := settleKind(r, res, known, outcome)
		if kind == "" {
			continue
		}
		op := store.Op{Kind: kind, Spec: r.spec, Tag: res.tag, Cost: max(res.taken, 1), Member: res.member, At: res.at}
		if r.Algorithm == store.Distinct && op.Member == "" {
			if op.Member, err = g.distinctMember(r, req.Subject); err != nil {
				return nil, err
			}
		}
		settled, ops = append(settled, r), append(ops, op)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	// The attempt was admitted by the backstop alone when the store failed.
	res, err := g.apply(ctx, settled, ops, d.StoreError != nil)
	if err != nil {
		return nil, fmt.Errorf("settle %s outcome: %w", req.Action, err)
	}
	out := make([]Result, len(settled))
	for i, r := range settled {
		out[i] = r.result(res[i], "")
	}
	return out, nil
}

// distinctMember is the member a distinct rule counts for subject: the
// hash of its dimension's value.
func (g *Guard) distinctMember(r *rule, subject Subject) (string, error) {
	v, err := g.dimension(r.Of, subject)
	if err != nil {
		return "", fmt.Errorf("rule %s: %w", r.Name, err)
	}
	return g.valueHash(r.Of, v), nil
}

// settleKind is what outcome does to rule r, whose part in the decision
// was res (known: the decision is at hand; else res assumes one unit
// taken now).
func settleKind(r *rule, res Result, known bool, outcome Outcome) store.OpKind {
	switch {
	case r.Count == CountFailures:
		switch failed := outcome == Failure || (outcome == Stray && !r.owned); {
		case outcome == Held && r.owned:
			return "" // a failure of the account's until the proof
		case outcome == Held && res.taken > 0:
			// a right password is no failure of the address's or the
			// network's (an office's unanswered challenges must not
			// count as failed accounts)
			return store.Refund
		case failed && r.Lockout != nil:
			return store.Strike
		case failed:
			return ""
		case outcome == Success && r.ResetOnSuccess:
			return store.Unblock // a success proves the pair: its failures and lockouts go
		case res.taken > 0 && outcome == Success:
			return store.Refund
		case res.taken > 0:
			return store.Cancel // void, or a stray guess at what the subject owns: it never happened
		}
		return ""
	case known && res.Challenged:
		// a challenge held the take back: the proof commits it
		if outcome == Success {
			return store.Commit
		}
		return ""
	case !known && outcome == Success && r.Algorithm == store.Distinct && (r.Count == CountSuccesses || r.Mode == ModeChallenge):
		// whether a challenge held it back is unknown: committing a value
		// is the same whether or not the set has it
		return store.Commit
	case r.Count == CountHeld:
		switch {
		case outcome == Held:
			return "" // it waits for its proof: counted
		case outcome == Success:
			return store.Unblock // the account proved itself: what waited is over
		case known && res.Challenged:
			return "" // a challenge held its take back
		case res.taken > 0:
			return store.Cancel // a wrong password, a void attempt: nothing held
		}
		return ""
	case r.Count == CountSuccesses:
		// a value counts once its attempt succeeds; a value the set had
		// already (taken 0) stays
		if outcome != Success && known && res.taken > 0 {
			return store.Cancel
		}
		return ""
	case outcome == Void && res.taken > 0:
		return store.Cancel
	}
	return ""
}

// Prove commits what the challenge rules of d held back, now that the
// request gave their proof (a solved CAPTCHA): d with those rules'
// results as if they had allowed (their units taken), for the rest of
// the attempt (a Void then gives them back). A decision without a
// challenge is returned as it is.
func (g *Guard) Prove(ctx context.Context, req Request, d Decision) (Decision, error) {
	if !d.Allowed || !d.Challenged {
		return d, nil
	}
	var rules []*rule
	var ops []store.Op
	var at []int
	for k, res := range d.Rules {
		r := g.byName[res.Rule]
		if r == nil || !res.Challenged || r.spec.Failures {
			continue
		}
		rules, at = append(rules, r), append(at, k)
		ops = append(ops, store.Op{Kind: store.Commit, Spec: r.spec, Tag: res.tag, Cost: 1, Member: res.member})
	}
	out := d
	out.Rules = slices.Clone(d.Rules)
	if len(ops) > 0 {
		res, err := g.apply(ctx, rules, ops, d.StoreError != nil)
		if err != nil {
			return d, fmt.Errorf("commit the proven %s: %w", req.Action, err)
		}
		for i, k := range at {
			r := &out.Rules[k]
			r.Allowed, r.Challenged, r.taken, r.at = true, false, res[i].Taken, res[i].Now
		}
	}
	for k := range out.Rules {
		out.Rules[k].Challenged = false
	}
	out.Challenged, out.ChallengedBy, out.Fallback = false, "", ""
	return out, nil
}

// Release gives back the concurrency leases that the decision with lease
// took for req.
func (g *Guard) Release(ctx context.Context, req Request, lease string) error {
	if lease == "" {
		return nil
	}
	rules := g.match(req, true)
	tags, err := g.tags(rules, req.Subject)
	if err != nil {
		return err
	}
	var rs []*rule
	var ops []store.Op
	for i, r := range rules {
		if r.Algorithm != store.Concurrency {
			continue
		}
		// tags are the untrusted device's; a rule keyed on the device may
		// have taken the lease under the trusted one: release both
		rs, ops = append(rs, r), append(ops, store.Op{Kind: store.Release, Spec: r.spec, Tag: tags[i], Cost: 1, Member: lease})
		if id, _, ok := g.devices.verify(req.Device, req.Subject.Account); ok && r.keyedDevice {
			s := req.Subject
			s.device = id
			tag := g.tag([]*rule{r}, make([]string, 1), 0, s)
			rs, ops = append(rs, r), append(ops, store.Op{Kind: store.Release, Spec: r.spec, Tag: tag, Cost: 1, Member: lease})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := g.apply(ctx, rs, ops, false); err != nil {
		return fmt.Errorf("release %s lease: %w", req.Action, err)
	}
	return nil
}

// apply is the one place where the store's state changes outside a
// decision (a strike, a refund, a release, an unblock; a status read) and
// where the process's copies follow it: the deny cache forgets what a
// refund, release or unblock may have ended, the leases what an unblock
// cleared, and the backstop gets the same change, or for a strike and a
// read what the store answered. When the decision being settled was made
// by the backstop alone (the store was failing), only the backstop
// changes.
func (g *Guard) apply(ctx context.Context, rules []*rule, ops []store.Op, backstopOnly bool) ([]store.OpResult, error) {
	// before, and again once the store has the change: a denial read
	// between the two may be the state the change ends
	g.forget(rules, ops)
	defer g.forget(rules, ops)
	if backstopOnly {
		return g.applyBackstop(ctx, rules, ops)
	}
	var same, mo []store.Op
	for i, op := range ops {
		if rules[i].allow && g.backstop != nil {
			if op.Kind == store.Strike || op.Kind == store.Peek {
				mo = append(mo, op)
			} else {
				same = append(same, op)
			}
		}
	}
	res, err := g.do(ctx, g.store, ops)
	if err != nil {
		return nil, err
	}
	if len(mo) > 0 {
		var mr []store.OpResult
		for i, op := range ops {
			if rules[i].allow && (op.Kind == store.Strike || op.Kind == store.Peek) {
				mr = append(mr, res[i])
			}
		}
		g.backstop.Mirror(mo, mr)
	}
	if len(same) > 0 {
		_, _ = g.do(ctx, g.backstop, same) // in memory: it does not fail
	}
	return res, nil
}

// forget drops what this process keeps of the states ops change: the
// deny cache's denials that a refund, release or unblock may have ended,
// and the leases an unblock cleared.
func (g *Guard) forget(rules []*rule, ops []store.Op) {
	for i, op := range ops {
		key := op.Spec.ID + op.Tag
		switch op.Kind {
		case store.Refund, store.Cancel, store.Release:
			switch {
			case g.cache == nil || !rules[i].cacheable():
				// nothing of it is cached
			case rules[i].Algorithm == store.Distinct:
				// the room a value leaves is every other value's: each
				// one's remembered denial may have ended
				g.cache.dropState(op.Spec.ID, tagKeyOf(op.Tag))
			default:
				g.cache.drop(denyKey{id: op.Spec.ID, tag: tagKeyOf(op.Tag)})
			}
		case store.Unblock:
			switch {
			case g.cache == nil || !rules[i].cacheable():
				// nothing of it is cached (a login's success resets
				// failure counts: no scan of the cache)
			case rules[i].Algorithm == store.Distinct:
				g.cache.dropState(op.Spec.ID, tagKeyOf(op.Tag)) // every value
			default:
				g.cache.drop(denyKey{id: op.Spec.ID, tag: tagKeyOf(op.Tag)})
			}
			g.leases.drop(key)
		}
	}
}

// applyBackstop is apply for a decision the backstop alone made: only the
// backstop changes (the rules that deny on store errors never reached it).
func (g *Guard) applyBackstop(ctx context.Context, rules []*rule, ops []store.Op) ([]store.OpResult, error) {
	res := make([]store.OpResult, len(ops))
	var bops []store.Op
	var at []int
	for i, op := range ops {
		res[i] = store.OpResult{Allowed: true}
		if rules[i].allow && g.backstop != nil {
			bops, at = append(bops, op), append(at, i)
		}
	}
	if len(bops) > 0 {
		br, err := g.do(ctx, g.backstop, bops)
		if err != nil {
			return nil, err
		}
		for k, i := range at {
			res[i] = br[k]
		}
	}
	return res, nil
}
