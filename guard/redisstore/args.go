package redisstore

import (
	"strconv"
	"sync"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// The key format. Every key of a subject shares the hash tag {tag} (128
// bits of keyed hash, base64url: 22 characters), so a subject's keys live
// in one Redis Cluster slot:
//
//	og:{tag}        the packed hash: the state of every packed rule keyed
//	                on the same dimensions, a field per rule and slot
//	og:{tag}ID      a rule's own key (ID: two characters), 29 bytes in all
//	og:{tag}IDk     a fixed window's own key that holds its end too (k: a
//	                letter for the value's P, see endInValue)
//	og:{tag}ID:l    its lockout hash, when it has a lockout and is not packed
//	og:{tag}dv      an account's device-token revocation time
//	og:{tag}:otp    a pending verification code (the otp package's tag)
//	og:{tag}:otpv   the number of its last put (code_put)
const keyPrefix = "og:{"

// The per-op arguments, in the order otpguard.lua names them: SPEC, DYN.
// SPEC is a rule's unchanging arguments in one string,
// "alg|limit|window|enforce|field|ttl|lock|min|elastic|challenge|keep", encoded once per Spec here and
// parsed once per node there; DYN the op's own, "kind|cost|extra|member|at"
// (kind: the letter and its device condition, T or U, if any), or the
// kind alone when the others are 1, 0, "", 0 (most takes). A batch of
// plain takes alone (DYN "t", the commonest) is sent as "t" in the count's
// place and each op's SPEC alone: three arguments fewer for three rules,
// about 4% of the call's server instructions.
const argsPerOp = 2

// plainTakes reports whether a batch is of plain takes alone (every op's
// DYN "t": a take of one unit for every client).
func plainTakes(ops []store.Op) bool {
	for i := range ops {
		if kind, ok := short(&ops[i]); !ok || kind != "t" {
			return false
		}
	}
	return len(ops) > 0
}

// countArg is a batch's argument before its ops': "t" for plain takes
// alone, else the number of ops.
func countArg(plain bool, n int) any {
	if plain {
		return "t"
	}
	return n
}

// static is a Spec's unchanging argument, boxed once, and its own key's
// suffix.
type static struct {
	spec   any
	suffix string
}

// endInValue reports whether a fixed window on its own key keeps its
// window's end in its key's value beside the count (otpguard.lua's
// fe_split: count + M * (the end's ms mod P), P the least power of two
// above the window's ms plus a minute, M = 2^53 / P: an end read from
// clocks up to a minute apart never wraps into the window),
// and P's exponent: where it has no lockout or challenge and twice its
// limit is below M (a window of an hour, limits below 2^30; of a day,
// below 2^25). Its key then ends in a letter for P: a library before
// this one, still running during a deploy, never reads such a value as
// a count, and a window changed to another P never reads one of the
// P before.
func endInValue(s *store.Spec) (int, bool) {
	if s.Algorithm != store.FixedWindow || s.Packed || s.Lockout != nil || s.Challenge || s.Limit < 0 {
		return 0, false
	}
	pxn := max(1, (s.Window.Microseconds()+999)/1000)
	k := 10
	for int64(1)<<k < pxn+60001 {
		k++
		if k > 35 {
			return 0, false
		}
	}
	return k, s.Limit < int64(1)<<(52-k) // (twice the limit below M, without doubling a huge one past int64)
}

var algCode = map[store.Algorithm]string{
	store.FixedWindow: "fw", store.TokenBucket: "tb", store.SlidingWindow: "sw",
	store.SlidingLog: "sl", store.Concurrency: "cc", store.Distinct: "ds", store.Ratio: "rt", store.Devices: "dv",
}

// statics caches the encoding of each Spec, per store. A config refresh
// makes new Specs; the cache is dropped when it grows past a bound.
type statics struct {
	sync.RWMutex
	m map[*store.Spec]*static
}

const maxStatics = 4096

func (statics *statics) of(s *store.Spec) *static {
	statics.RLock()
	st := statics.m[s]
	statics.RUnlock()
	if st != nil {
		return st
	}
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	enforce, field, ttl, lock := "0", "", "0", ""
	if s.Enforce {
		enforce = "1"
	}
	if s.Packed {
		field, ttl = s.ID, us(s.PackTTL)
	}
	if l := s.Lockout; l != nil {
		lock = us(l.Initial) + " " + strconv.FormatFloat(l.Factor, 'f', -1, 64) + " " + us(l.Max) + " " + us(l.Reset)
	}
	mn, elastic := "", ""
	if s.Min > 0 {
		mn = strconv.FormatInt(s.Min, 10)
	}
	if s.Elastic > 0 {
		elastic = strconv.FormatFloat(s.Elastic, 'g', -1, 64)
	}
	challenge, keep := "", ""
	switch {
	case s.Challenge && s.Failures:
		challenge = "2"
	case s.Challenge:
		challenge = "1"
	}
	if s.Keep > s.Limit {
		keep = strconv.FormatInt(s.Keep, 10)
	}
	alg, suffix := algCode[s.Algorithm], ""
	if k, ok := endInValue(s); ok {
		alg, suffix = "fe", string(rune('a'+k-10))
	}
	st = &static{suffix: suffix, spec: alg + "|" + strconv.FormatInt(s.Limit, 10) + "|" + us(s.Window) + "|" + enforce + "|" + field + "|" + ttl + "|" + lock + "|" + mn + "|" + elastic + "|" + challenge + "|" + keep}
	statics.Lock()
	if statics.m == nil || len(statics.m) >= maxStatics {
		statics.m = map[*store.Spec]*static{}
	}
	statics.m[s] = st
	statics.Unlock()
	return st
}

// kindArgs boxes each (kind, condition)'s short argument once.
var kindArgs = map[store.OpKind][3]any{}

// condLetter is how the library reads an op's device condition.
var condLetter = [3]string{store.Always: "", store.CondTrusted: "T", store.CondUntrusted: "U"}

func init() {
	for _, k := range []store.OpKind{store.Take, store.Peek, store.Strike, store.Refund, store.Cancel, store.Unblock,
		store.Release, store.Reserve, store.DeviceCheck, store.Revoke, store.Commit} {
		kindArgs[k] = [3]any{string(k), string(k) + "T", string(k) + "U"}
	}
}

// keysOf is the number of keys op names: its state's, and its lockout's
// when it has one of its own.
func keysOf(op *store.Op) int {
	if op.Spec.Lockout != nil && !op.Spec.Packed {
		return 2
	}
	return 1
}

// putKeys writes op's keys (keysOf) into a call's argv from place k, each
// made in one concatenation, and returns the place after them; st is its
// spec's.
func putKeys(argv []any, k int, op *store.Op, st *static) int {
	id := op.Spec.ID
	if op.Spec.Packed {
		argv[k] = keyPrefix + op.Tag + "}" + st.suffix
		return k + 1
	}
	argv[k] = keyPrefix + op.Tag + "}" + id + st.suffix
	if op.Spec.Lockout != nil {
		argv[k+1] = keyPrefix + op.Tag + "}" + id + ":l" // (its name whatever the count's layout: a lockout in force stays)
		return k + 2
	}
	return k + 1
}

// appendArgs adds op's arguments to a call's argv: its SPEC alone in a
// batch of plain takes (plain).
func appendArgs(argv []any, op *store.Op, st *static, plain bool) []any {
	if plain {
		return append(argv, st.spec)
	}
	if kind, ok := short(op); ok {
		return append(argv, st.spec, kind)
	}
	dyn := string(op.Kind) + condLetter[op.Cond] + "|" + strconv.FormatInt(op.Cost, 10) + "|" + strconv.FormatInt(op.Extra, 10) + "|" + op.Member + "|" + strconv.FormatInt(atArg(op), 10)
	return append(argv, st.spec, dyn)
}

// atArg is an op's AT: the time it names (µs), or for a reservation the
// longest wait it accepts.
func atArg(op *store.Op) int64 {
	switch {
	case op.Kind == store.Reserve:
		return op.MaxWait.Microseconds()
	case !op.At.IsZero():
		return op.At.UnixMicro()
	}
	return 0
}

// short is op's DYN when it is the kind and condition alone (the rest 1,
// 0, "", 0), boxed once.
func short(op *store.Op) (any, bool) {
	if op.Cost == 1 && op.Extra == 0 && op.Member == "" && atArg(op) == 0 {
		return kindArgs[op.Kind][op.Cond], true
	}
	return nil, false
}
