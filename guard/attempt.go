package guard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Attempt receipts settle a login attempt from another request that
// carries nothing of the first: Cognito's PostAuthentication trigger gets
// no client address, yet must give back exactly what PreAuthentication
// took on every rule, those keyed on the address included. A [Guard.Receipt]
// names each failure-counting rule's subject tag, time and units, but not
// the member a set algorithm added: settled, a distinct rule's refund
// (login-failed-accounts-per-ip, the accounts that failed from one
// address) would remove nothing. An attempt receipt is a receipt whose
// entries may carry that member as a fifth field.

// attemptClockSlack is how far two processes' estimates of the store's
// clock may be apart for SettleAttempt (see there).
const attemptClockSlack = time.Second

// AttemptReceipt is what settling d later needs, members included, or ""
// when d took nothing that a success gives back (denied, no
// failure-counting rule took, or the store failed and the backstop
// decided). Like a Receipt, it holds keyed hashes and numbers only.
func (g *Guard) AttemptReceipt(d Decision) string {
	if !d.Allowed || d.StoreError != nil {
		return ""
	}
	var b strings.Builder
	n := 0
	for _, res := range d.Rules {
		r := g.byName[res.Rule]
		if r == nil || r.Count != CountFailures || res.Leased || res.taken <= 0 || res.tag == "" || n == maxReceipt {
			continue
		}
		if n > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s,%s,%d,%d", r.Name, res.tag, res.at.UnixMicro(), res.taken)
		if res.member != "" && r.Algorithm == Distinct {
			b.WriteByte(',')
			b.WriteString(res.member)
		}
		n++
	}
	return b.String()
}

// SettleAttempt settles the attempt an [Guard.AttemptReceipt] (or a
// [Guard.Receipt]) describes, as [Guard.SettleReceipt] does: Success gives
// its failures back (a distinct rule's member too; a resetOnSuccess rule
// is cleared), Void undoes them. Rules the configuration no longer has
// are skipped.
func (g *Guard) SettleAttempt(ctx context.Context, receipt string, outcome Outcome) error {
	if receipt == "" {
		return nil
	}
	kind := Refund
	switch outcome {
	case Success:
	case Void:
		kind = Cancel
	default:
		return fmt.Errorf("%w: an attempt receipt settles a success or a void attempt", ErrInvalidInput)
	}
	var rules []*rule
	var ops []Op
	for _, e := range strings.Fields(receipt) {
		f := strings.Split(e, ",")
		if len(f) != 4 && len(f) != 5 {
			return fmt.Errorf("%w: malformed receipt", ErrInvalidInput)
		}
		at, err1 := strconv.ParseInt(f[2], 10, 64)
		units, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || units < 1 || units > MaxLimit {
			return fmt.Errorf("%w: malformed receipt", ErrInvalidInput)
		}
		r := g.byName[f[0]]
		if r == nil || r.Count != CountFailures || len(f[1]) != 22 {
			continue
		}
		op := Op{Kind: kind, Spec: r.spec, Tag: f[1], Cost: units, At: time.UnixMicro(at)}
		if r.Algorithm == FixedWindow {
			// A fixed window ignores a refund of a take older than the
			// window's start, which it reckons from the settling call's
			// clock within 2 ms; the attempt was taken by another process
			// (PreAuthentication's), whose estimate of the server's clock
			// may differ by more where scripts may not read TIME: a refund
			// seconds later then went nowhere. The take is named as of a
			// second later: only a window started within that second after
			// it is mistaken for its own.
			op.At = op.At.Add(attemptClockSlack)
		}
		if len(f) == 5 {
			if r.Algorithm != Distinct || len(f[4]) != 11 {
				continue // another rule of that name now, or not ours
			}
			op.Member = f[4]
		} else if r.Algorithm == Distinct {
			continue // without its member a refund would remove nothing
		}
		if outcome == Success && r.ResetOnSuccess {
			op.Kind = Unblock // a success proves the pair: its failures and lockouts go
		}
		rules, ops = append(rules, r), append(ops, op)
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := g.apply(ctx, rules, ops, false); err != nil {
		return fmt.Errorf("settle an attempt: %w", err)
	}
	return nil
}
