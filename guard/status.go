package guard

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// Status is one rule's state for one subject (see [Guard.Status]).
type Status struct {
	Rule       string
	Remaining  int64
	ResetAfter time.Duration
	Locked     bool
	LockedFor  time.Duration
}

// Status reports, for every rule keyed on dimension alone (for account,
// with the rules keyed on its device: the untrusted clients' bucket), the
// state of the subject whose value of it s holds.
func (g *Guard) Status(ctx context.Context, dimension string, s Subject) ([]Status, error) {
	rules, ops, err := g.onDimension(dimension, s, store.Peek)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	res, err := g.apply(ctx, rules, ops, false)
	if err != nil {
		return nil, fmt.Errorf("read %s state: %w", dimension, err)
	}
	out := make([]Status, len(rules))
	for i, r := range rules {
		x := r.result(res[i], "")
		out[i] = Status{Rule: r.Name, Remaining: x.Remaining, ResetAfter: x.ResetAfter, Locked: x.Locked}
		if x.Locked {
			out[i].LockedFor = x.RetryAfter
		}
	}
	return out, nil
}

// Unblock forgets, for every rule keyed on dimension alone (for account,
// with the rules keyed on its device: the untrusted clients' bucket), the counters,
// lockouts and lockout history of the subject whose value of it s holds:
// an administrator's unlock. It leaves the rules that count successes or
// held attempts: proofs and pending proofs are not blocks. It takes effect at once in this process, and
// in the others through Options.Unblocked (each then calls Forget).
func (g *Guard) Unblock(ctx context.Context, dimension string, s Subject) ([]string, error) {
	rules, ops, err := g.onDimension(dimension, s, store.Unblock)
	if err != nil || len(ops) == 0 {
		return nil, err
	}
	if _, err := g.apply(ctx, rules, ops, false); err != nil {
		return nil, fmt.Errorf("unblock %s: %w", dimension, err)
	}
	names := make([]string, len(rules))
	states := make([]State, len(rules))
	for i, r := range rules {
		names[i], states[i] = r.Name, State{ID: ops[i].Spec.ID, Tag: ops[i].Tag}
	}
	if g.unblocked != nil {
		g.unblocked(ctx, states)
	}
	return names, nil
}

// Forget drops what this process keeps of the given states (denials it
// remembers, leases, the backstop's copy): another process unblocked
// them. The next decision asks the store.
func (g *Guard) Forget(states []State) {
	for _, st := range states {
		if g.cache != nil {
			g.cache.dropState(st.ID, tagKeyOf(st.Tag))
		}
		g.leases.drop(st.ID + st.Tag)
		if g.backstop != nil {
			g.backstop.Forget(st.ID, st.Tag)
		}
	}
}

// ForgetAll drops every denial this process remembers and every lease it
// holds: the store may have lost its data (a restart, a failover).
func (g *Guard) ForgetAll() {
	if g.cache != nil {
		g.cache.clear()
	}
	g.leases.clear()
}

func (g *Guard) onDimension(dimension string, s Subject, kind store.OpKind) ([]*rule, []store.Op, error) {
	if !slices.Contains(Dimensions, dimension) {
		return nil, nil, fmt.Errorf("%w: unknown dimension %q", ErrInvalidInput, dimension)
	}
	var rules []*rule
	var ops []store.Op
	for _, r := range g.all {
		if !onlyOn(r, dimension) {
			continue
		}
		if kind == store.Unblock && (r.Count == CountSuccesses || r.Count == CountHeld) {
			// not a block: what the subject proved (the networks an
			// account logged in from) and what waits for its proof (a
			// right password held for its step-up code). Cleared, an
			// account would look new, and a new account is let in from
			// anywhere: the unblock would be a step-up bypass.
			continue
		}
		tags, err := g.tags([]*rule{r}, s)
		if err != nil {
			return nil, nil, err
		}
		rules, ops = append(rules, r), append(ops, store.Op{Kind: kind, Spec: r.spec, Tag: tags[0], Cost: 1})
	}
	return rules, ops, nil
}

// onlyOn reports whether r is keyed on dimension alone, or for the account
// dimension, on the account's device (the bucket its untrusted clients
// share, which a stranger's failures fill: what an unblock lifts; each
// trusted device's own is left as it is).
func onlyOn(r *rule, dimension string) bool {
	if len(r.Key) == 1 && r.Key[0] == dimension {
		return true
	}
	return dimension == "account" && r.keyedDevice && !slices.ContainsFunc(r.Key, func(k string) bool { return k != "device" && k != "account" })
}
