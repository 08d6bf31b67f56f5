package store

import (
	"context"
	"errors"
	"time"
)

// Store keeps the rules' state and applies a batch of operations. The
// batch is atomic with respect to its Take and Peek operations: every Take
// is applied only if no operation with Spec.Enforce set denies. A store
// may stop evaluating Takes and Peeks at the first enforcing denial and
// report the rest Skipped. The redisstore package is the production Store;
// the memstore package is the in-process backstop with the same semantics.
type Store interface {
	Do(ctx context.Context, ops []Op) ([]OpResult, error)
}

// Backstop is the store that decides while the Store fails: a copy, in
// this process, of the store's state for the rules with onStoreError
// allow (memstore.New). It is never asked while the store answers.
type Backstop interface {
	Store
	// Begin notes takes about to be sent to the store: until Mirror or
	// End ends them, they count as taken, so that the requests of a burst
	// whose store calls time out are not admitted by the store and then
	// again by the backstop.
	Begin(ops []Op)
	// End ends takes the store did not answer (the backstop then decides
	// them with Do).
	End(ops []Op)
	// Mirror ends takes the store answered, and sets each op's state to
	// what the store answered for it (plus the takes still in flight).
	Mirror(ops []Op, res []OpResult)
	// Forget drops the state of rule id for subject tag (an unblock
	// made through another process).
	Forget(id, tag string)
}

// ErrStoreUnavailable is wrapped by every error a Store returns when it
// cannot be reached in time.
var ErrStoreUnavailable = errors.New("store unavailable")

// OpKind is what an Op does to its rule's state.
type OpKind string

// The operation kinds.
const (
	// Take checks and, when the whole batch allows, consumes Cost (and up
	// to Extra more units, for a lease). Failure-counting rules are taken
	// too: an admitted attempt counts as a failure until it is settled.
	Take OpKind = "t"
	// Peek checks whether Cost more would be allowed; it writes nothing.
	Peek OpKind = "p"
	// Strike settles a failure on a rule with a lockout: if the rule is
	// at its limit, or the subject was locked out before within the
	// lockout's reset, a lockout starts (the next duration) and the
	// counter starts afresh.
	Strike OpKind = "s"
	// Refund settles Cost units a Take consumed at At as a success (Member
	// for the set algorithms; At zero means "in the current window"): they
	// are given back; a ratio keeps the attempt and gives back its
	// failure; an elastic rule also counts them among its verified units.
	Refund OpKind = "r"
	// Cancel undoes a Take entirely, as if it never happened (a void
	// attempt, a take that another group's denial made moot): as Refund,
	// except that a ratio gives back the attempt too and an elastic rule
	// counts nothing verified.
	Cancel OpKind = "c"
	// DeviceCheck reads whether the device token issued at At (store
	// time) is still trusted: not revoked since and younger than the
	// spec's Window. The takes and peeks of the batch with a Cond apply
	// or not by its answer (OpResult.Allowed); it must come before them.
	DeviceCheck OpKind = "d"
	// Revoke revokes every device token of an account issued until now.
	Revoke OpKind = "D"
	// Unblock forgets the counter, any lockout and the lockout history.
	Unblock OpKind = "u"
	// Release removes the concurrency lease Member.
	Release OpKind = "l"
	// Reserve books the next slot of a token bucket even in the future and
	// reports the wait, unless the wait would exceed MaxWait.
	Reserve OpKind = "v"
	// Commit applies the take of Cost units (Member for the set
	// algorithms) that a challenge held back, whatever the rule's state:
	// the proof was given. A distinct value is added (or refreshed).
	Commit OpKind = "k"
)

// Spec is the part of a rule a Store needs, computed once per rule and
// shared by all of its operations.
type Spec struct {
	// ID names the rule's state among the rules keyed on the same
	// dimensions: two base64url characters, unique among them.
	ID        string
	Algorithm Algorithm
	// Limit is the effective limit (for soft rules, with the overage).
	Limit  int64
	Window time.Duration
	// Enforce makes a denial of this rule deny the whole batch.
	Enforce bool
	// Challenge, with Enforce, turns the rule's denial into a challenge:
	// the batch is not denied for it and its result says Challenged. A
	// challenged Take takes nothing (what it would mark seen or consume
	// waits for the proof: Commit applies it then), unless Failures.
	Challenge bool
	// Failures: the rule counts failures. A challenged Take of such a
	// rule takes its units at once, as any of its takes: the attempt is a
	// failure until a success (the proof) gives it back.
	Failures bool
	// Keep is how many values a distinct rule's set keeps, at least
	// Limit (0: Limit). A new value is admitted while the set holds fewer
	// than Limit; values committed after a proof may fill it to Keep.
	Keep int64
	// Lockout is the rule's progressive lockout, or nil.
	Lockout *Lockout
	// Min is the ratio algorithm's least number of attempts before it
	// may deny (Limit is then the percentage).
	Min int64
	// Elastic is, for an elastic sliding window, the ratio of its
	// verified units (refunds) that its limit grows to; 0 for none.
	Elastic float64
	// Packed keeps the state in one Redis hash per subject, shared with
	// the subject's other rules keyed on the same dimensions (fixed
	// window, token bucket and sliding window only). PackTTL is that
	// hash's TTL: the longest state any of those rules keeps.
	Packed  bool
	PackTTL time.Duration
}

// Op is one operation on one rule's state for one subject.
type Op struct {
	Kind OpKind
	Spec *Spec
	// Tag is the keyed hash of the subject's values of the rule's
	// dimensions. Operations with one Tag share a Redis Cluster slot.
	Tag string
	// Cost is how many units the Op takes, gives back or checks.
	Cost int64
	// Extra asks a Take for up to Extra more units, granted only from
	// what the limit leaves (at most a quarter of it): a lease.
	Extra int64
	// Member names what a set algorithm adds or removes: a sliding-log
	// entry, a concurrency lease, or the keyed hash of a distinct value.
	Member string
	// At is when the Take a Refund undoes was decided (store time). A
	// fixed window takes it as its own when At is no more than
	// [FixedWindowSlack] before the window's start.
	At time.Time
	// MaxWait bounds a Reserve.
	MaxWait time.Duration
	// Cond makes a Take or Peek apply only when the batch's DeviceCheck
	// trusted the device (CondTrusted) or did not (CondUntrusted).
	Cond Cond
}

// Cond is an op's device condition (see Op.Cond).
type Cond uint8

// The conditions.
const (
	Always Cond = iota
	CondTrusted
	CondUntrusted
)

// OpResult is the outcome of one Op.
type OpResult struct {
	// Allowed reports whether this Op alone allows.
	Allowed bool
	// Remaining is how many more units the rule admits now.
	Remaining int64
	// ResetAfter is when the rule's state is back to empty.
	ResetAfter time.Duration
	// RetryAfter is, when denied, the wait before Cost would be admitted;
	// for an allowed Reserve, the wait before the reserved slot.
	RetryAfter time.Duration
	// Locked reports that a lockout denies (or, for Strike, has started).
	Locked bool
	// Skipped reports that the Op was not evaluated because an earlier
	// enforcing denial decided the batch.
	Skipped bool
	// Inapplicable reports that the Op's Cond did not hold: it did
	// nothing and decides nothing.
	Inapplicable bool
	// Challenged reports that a challenge rule would have denied: the
	// request asks for a proof. The op took nothing, unless its rule
	// counts failures (Spec.Failures) and the batch was allowed.
	Challenged bool
	// Taken is how many units a Take consumed (Cost plus any lease extra);
	// 0 when the batch was denied.
	Taken int64
	// Now is the store's clock when the Op was applied.
	Now time.Time
}

// FixedWindowSlack is how far before a fixed window's start a take that a
// Refund, Cancel or Release names may have been made and still be given
// back from that window. The start is reckoned from the settling call's
// clock and the window's TTL, the take's time from the deciding call's:
// two estimates of the store's clock (another process's, where scripts
// may not read TIME) or two readings of a loaded server's, apart by more
// than the TTL's milliseconds. Only a window started within the slack
// after a take is mistaken for its own: a unit given back early.
const FixedWindowSlack = time.Second

// Lockout is a progressive lockout: the first lasts Initial, each further
// one of the same subject Factor times longer, up to Max. A subject's
// lockout count is forgotten after Reset without a lockout.
type Lockout struct {
	Initial time.Duration `yaml:"initial"`
	Factor  float64       `yaml:"factor"`
	Max     time.Duration `yaml:"max"`
	// Reset is how long the lockout count is remembered. Default 24h.
	Reset time.Duration `yaml:"reset"`
}

// Algorithm names a rate-limiting algorithm.
type Algorithm string

// The algorithms (docs/contract.md §5).
const (
	FixedWindow   Algorithm = "fixed_window"
	SlidingWindow Algorithm = "sliding_window"
	TokenBucket   Algorithm = "token_bucket"
	SlidingLog    Algorithm = "sliding_log"
	Concurrency   Algorithm = "concurrency"
	Distinct      Algorithm = "distinct"
	Ratio         Algorithm = "ratio"
	// Devices is not a rule's: the state of an account's device tokens
	// (the DeviceCheck and Revoke ops).
	Devices Algorithm = "devices"
)

// Algorithms lists every algorithm a rule may name.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog, Concurrency, Distinct, Ratio}
