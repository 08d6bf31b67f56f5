package guard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// Receipts settle an attempt from another request. A send counts as a
// failure on the otp.send rules with count: failures until its code is
// approved, and the verify that approves it is another request (another
// process, another IP): the send's Receipt is kept with the code, and the
// verify settles it with [Guard.SettleReceipt]. A login held for a
// step-up code is settled the same way by the request that answers it.
// A receipt names each rule by name with the subject's tag, the store
// time of the take, its units, the set member it took (or "") and what a
// success does with it: "f" a failure to give back, "k" a take to commit
// (what a challenge held back, or a count: successes value), "h" a held
// count to clear, "v" a unit a void settlement gives back (VoidReceipt): keyed hashes and numbers, no identifier. Entries are separated by spaces, fields by
// commas; an entry of four fields is an "f" without a member (as receipts
// were written before).

// maxReceipt bounds the rules one receipt names.
const maxReceipt = 16

// Receipt is what settling d later needs, or "" when d took and held back
// nothing a later outcome settles (denied, no rule counts failures or
// successes and none challenged, or the store failed and the backstop
// decided).
func (g *Guard) Receipt(d Decision) string { return g.receipt(d, false, false) }

// HeldReceipt is the receipt of an attempt settled as Held (a right
// password waiting for a step-up code given in another request): what
// its proof settles with [Guard.SettleReceipt] (Success commits and gives
// back what waited for it), without the failures Held gives back at once.
func (g *Guard) HeldReceipt(d Decision) string { return g.receipt(d, true, false) }

// VoidReceipt is what undoing d later needs: every unit it took, each
// an entry "v" that only a Void settlement reads (Cancel), for a send
// whose message is given up on after its request ended (the delivery
// queue's dead letters). "" when d took nothing.
func (g *Guard) VoidReceipt(d Decision) string { return g.receipt(d, false, true) }

// receipt is Receipt, or (held) HeldReceipt, or (void) VoidReceipt.
func (g *Guard) receipt(d Decision, held, void bool) string {
	if !d.Allowed || d.StoreError != nil {
		return ""
	}
	var b strings.Builder
	n := 0
	for _, res := range d.Rules {
		r := g.byName[res.Rule]
		if r == nil || res.Leased || res.tag == "" || n == maxReceipt {
			continue
		}
		kind := ""
		switch {
		case void && res.taken > 0 && !res.Challenged:
			kind = "v"
		case void:
		case r.Count == CountFailures && held && !r.owned:
		case r.Count == CountFailures && res.taken > 0:
			kind = "f"
		case r.Count == CountFailures:
		case r.Count == CountHeld:
			kind = "h" // the proof clears the count, taken or held back
		case res.Challenged:
			kind = "k"
		case r.Count == CountSuccesses && res.member != "":
			kind = "k"
		}
		if kind == "" {
			continue
		}
		if n > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.Name)
		b.WriteByte(',')
		b.WriteString(res.tag)
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(res.at.UnixMicro(), 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(max(res.taken, 1), 10))
		b.WriteByte(',')
		b.WriteString(res.member)
		b.WriteByte(',')
		b.WriteString(kind)
		n++
	}
	return b.String()
}

// SettleReceipt settles the attempt a [Guard.Receipt] describes: Success
// gives its failures back (and counts them verified on elastic rules;
// clears a resetOnSuccess rule) and commits what it held back; Void
// undoes its failures and commits nothing. Rules the configuration no
// longer has are skipped.
func (g *Guard) SettleReceipt(ctx context.Context, receipt string, outcome Outcome) error {
	if receipt == "" {
		return nil
	}
	kind := store.Refund
	switch outcome {
	case Success:
	case Void:
		kind = store.Cancel
	default:
		return fmt.Errorf("%w: a receipt settles a success or a void attempt", ErrInvalidInput)
	}
	var rules []*rule
	var ops []store.Op
	for _, e := range strings.Fields(receipt) {
		f := strings.Split(e, ",")
		if len(f) == 4 {
			f = append(f, "", "f")
		}
		if len(f) != 6 || (f[5] != "f" && f[5] != "k" && f[5] != "h" && f[5] != "v") || len(f[4]) > 64 {
			return fmt.Errorf("%w: malformed receipt", ErrInvalidInput)
		}
		at, err1 := strconv.ParseInt(f[2], 10, 64)
		units, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || units < 1 || units > MaxLimit {
			return fmt.Errorf("%w: malformed receipt", ErrInvalidInput)
		}
		r := g.byName[f[0]]
		if r == nil || len(f[1]) != 22 {
			continue
		}
		k, ok := entryKind(r, f[5], kind, outcome)
		if !ok {
			continue
		}
		if r.Algorithm == store.Distinct && f[4] == "" && k != store.Unblock {
			continue // a set's entry is named by its member
		}
		op := store.Op{Kind: k, Spec: r.spec, Tag: f[1], Cost: units, Member: f[4], At: time.UnixMicro(at)}
		rules, ops = append(rules, r), append(ops, op)
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := g.apply(ctx, rules, ops, false); err != nil {
		return fmt.Errorf("settle a receipt: %w", err)
	}
	return nil
}

// entryKind is what settling a receipt's entry of rule r, marked mark (f:
// a failure taken, k: a take held back, h: a held count, v: a unit of a
// void attempt), does for outcome, kind being the outcome's default (a
// refund for a success, a cancel for a void); false: nothing.
func entryKind(r *rule, mark string, kind store.OpKind, outcome Outcome) (store.OpKind, bool) {
	k := kind
	switch {
	case mark == "v" && outcome == Void:
		k = store.Cancel // a unit of the attempt: it never happened
	case mark == "v":
		return "", false
	case mark == "h" && r.Count != CountHeld:
		return "", false
	case mark == "h" && outcome == Success:
		k = store.Unblock // the proof: what waited for it is over
	case mark == "h":
		return "", false // a void attempt's held count is the decision's to give back (Settle)
	case mark == "k" && (outcome != Success || r.Count == CountFailures):
		return "", false // held back: a success commits it, nothing else does
	case mark == "k":
		k = store.Commit
	case r.Count != CountFailures:
		return "", false
	case outcome == Success && r.ResetOnSuccess:
		k = store.Unblock // a success proves the pair: its failures and lockouts go
	}
	return k, true
}

// Derive returns a 256-bit key for label, derived from the deployment
// secret (HMAC-SHA256): the step-up sessions' encryption key, and the
// like. Labels name their use; two labels never share a key.
func (g *Guard) Derive(label string) []byte { return DeriveKey(g.secret, label) }

// DeriveKey is [Guard.Derive] of the deployment secret, for the parts
// built before a guard (the delivery queue).
func DeriveKey(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("otpguard derive\x00" + label))
	return m.Sum(nil)
}
