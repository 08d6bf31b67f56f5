package guard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Receipts settle an attempt from another request. A send counts as a
// failure on the otp.send rules with count: failures until its code is
// approved, and the verify that approves it is another request (another
// process, another IP): the send's Receipt is kept with the code, and the
// verify settles it with [Guard.SettleReceipt]. A receipt names each rule
// by name with the subject's tag, the store time of the take and its
// units: keyed hashes and numbers, no identifier.

// maxReceipt bounds the rules one receipt names.
const maxReceipt = 16

// Receipt is what settling d's failure-counting rules later needs, or ""
// when d took nothing they count (denied, none of its rules counts
// failures, or the store failed and the backstop decided).
func (g *Guard) Receipt(d Decision) string {
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
		b.WriteString(r.Name)
		b.WriteByte(',')
		b.WriteString(res.tag)
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(res.at.UnixMicro(), 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(res.taken, 10))
		n++
	}
	return b.String()
}

// SettleReceipt settles the attempt a [Guard.Receipt] describes: Success
// gives its failures back (and counts them verified on elastic rules;
// clears a resetOnSuccess rule), Void undoes them. Rules the configuration no longer has are skipped.
func (g *Guard) SettleReceipt(ctx context.Context, receipt string, outcome Outcome) error {
	if receipt == "" {
		return nil
	}
	kind := Refund
	switch outcome {
	case Success:
	case Void:
		kind = Cancel
	default:
		return fmt.Errorf("%w: a receipt settles a success or a void attempt", ErrInvalidInput)
	}
	var rules []*rule
	var ops []Op
	for _, e := range strings.Fields(receipt) {
		f := strings.Split(e, ",")
		if len(f) != 4 {
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
		k := kind
		if outcome == Success && r.ResetOnSuccess {
			k = Unblock // a success proves the pair: its failures and lockouts go
		}
		rules = append(rules, r)
		ops = append(ops, Op{Kind: k, Spec: r.spec, Tag: f[1], Cost: units, At: time.UnixMicro(at)})
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := g.apply(ctx, rules, ops, false); err != nil {
		return fmt.Errorf("settle a receipt: %w", err)
	}
	return nil
}

// Derive returns a 256-bit key for label, derived from the deployment
// secret (HMAC-SHA256): the step-up sessions' encryption key, and the
// like. Labels name their use; two labels never share a key.
func (g *Guard) Derive(label string) []byte {
	m := hmac.New(sha256.New, g.secret)
	m.Write([]byte("otpguard derive\x00" + label))
	return m.Sum(nil)
}
