package guard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"math/bits"
	"slices"
	"strconv"

	"github.com/otpguard/otpguard/guard/store"
)

// match returns the rules of req's action whose filters req passes. The
// device attribute is untrusted, unless maybe (a token the store is to
// judge): then a rule filtered on the device passes with either value.
func (g *Guard) match(req Request, maybe bool) []*rule {
	all := g.byAction[req.Action]
	if len(all) > 64 {
		if !slices.ContainsFunc(all, func(r *rule) bool { return !g.applies(r, req, maybe) }) {
			return all
		}
		return g.filter(all, req, maybe)
	}
	var in uint64 // the rules that apply, a bit each
	for i, r := range all {
		if g.applies(r, req, maybe) {
			in |= 1 << i
		}
	}
	if in == 1<<len(all)-1 {
		return all // the action's own list, shared and never written
	}
	// The lists that leave rules out are kept, one per action and set of
	// rules (a few: they follow the filters' values and the dimensions a
	// partial request has), up to a bound past which they are built per
	// request: a list is the same slice on every request, as the action's
	// own is (a cached denial's shared Rules need it).
	k := listKey{req.Action, in}
	if l, ok := g.lists.Load(k); ok {
		return l.([]*rule)
	}
	out := make([]*rule, 0, bits.OnesCount64(in))
	for i, r := range all {
		if in&(1<<i) != 0 {
			out = append(out, r)
		}
	}
	if g.listsKept.Add(1) <= maxLists {
		if l, loaded := g.lists.LoadOrStore(k, out); loaded {
			return l.([]*rule)
		}
	}
	return out
}

// listKey names a list of an action's rules: the action and a bit per rule.
type listKey struct {
	action string
	in     uint64
}

// maxLists bounds the rule lists match keeps.
const maxLists = 1024

// filter is a new list of the rules of all that apply to req.
func (g *Guard) filter(all []*rule, req Request, maybe bool) []*rule {
	var out []*rule
	for _, r := range all {
		if g.applies(r, req, maybe) {
			out = append(out, r)
		}
	}
	return out
}

// applies reports whether r applies to req: its filters pass, and a
// partial request has the values it needs.
func (g *Guard) applies(r *rule, req Request, maybe bool) bool {
	if req.Partial && ((r.Of != "" && !has(r.Of, req.Subject)) || slices.ContainsFunc(r.dims, func(dim string) bool { return !has(dim, req.Subject) })) {
		return false
	}
	return r.matches(req.Attributes, maybe)
}

func (r *rule) matches(attrs map[string]string, maybe bool) bool {
	for k, vs := range r.When {
		if k == "device" {
			if !maybe && !r.onUntrusted {
				return false
			}
			continue
		}
		v, ok := attrs[k]
		if !ok || !slices.Contains(vs, v) {
			return false
		}
	}
	return true
}

func (r *rule) result(o store.OpResult, member string) Result {
	res := Result{
		Rule: r.Name, Mode: r.Mode, Allowed: o.Allowed, Limit: r.Limit, Window: r.Window,
		Remaining: o.Remaining, ResetAfter: o.ResetAfter, RetryAfter: o.RetryAfter, Locked: o.Locked,
		Challenged: o.Challenged, Skipped: o.Skipped, taken: o.Taken, member: member, at: o.Now,
	}
	if extra := r.limit - r.Limit; extra > 0 {
		res.Remaining -= extra
		res.Over = o.Allowed && !o.Skipped && res.Remaining < 0
	}
	res.Remaining = max(res.Remaining, 0)
	if res.Allowed || res.Challenged {
		res.RetryAfter = 0
	}
	if res.Locked && !o.Now.IsZero() {
		res.LockedUntil = o.Now.Add(o.RetryAfter) // the store's: a challenged result reports no RetryAfter
	}
	return res
}

// tags returns, for each rule, the keyed hash of the subject's values of
// the rule's dimensions, computing it once per set of dimensions.
func (g *Guard) tags(rules []*rule, s Subject) ([]string, error) {
	if err := g.hasDims(rules, s); err != nil {
		return nil, err
	}
	tags := make([]string, len(rules))
	for i := range rules {
		g.tag(rules, tags, i, s)
	}
	return tags, nil
}

// hasDims reports, as an error, a dimension some rule needs that the
// subject lacks.
func (g *Guard) hasDims(rules []*rule, s Subject) error {
	for _, r := range rules {
		for _, dim := range r.dims {
			if !has(dim, s) {
				return fmt.Errorf("rule %s: %w", r.Name, missing(dim))
			}
		}
	}
	return nil
}

// tag fills tags[i], once: the keyed hash of rule i's values, shared with
// an earlier rule on the same dimensions. The subject has every dimension
// (hasDims).
func (g *Guard) tag(rules []*rule, tags []string, i int, s Subject) string {
	if tags[i] == "" {
		tags[i] = g.knownTag(rules, tags, i)
	}
	if tags[i] == "" {
		k := g.subjectTag(rules[i].dims, s)
		tags[i] = string(k[:])
	}
	return tags[i]
}

// knownTag is rule i's tag when it is known without hashing: already in
// tags, the global one, or an earlier rule's on the same dimensions; ""
// otherwise.
func (g *Guard) knownTag(rules []*rule, tags []string, i int) string {
	if tags[i] != "" {
		return tags[i]
	}
	r := rules[i]
	if len(r.dims) == 1 && r.dims[0] == "global" {
		return g.global
	}
	for j, o := range rules {
		if j != i && tags[j] != "" && slices.Equal(o.dims, r.dims) {
			return tags[j]
		}
	}
	return ""
}

// tagKey is a subject tag (22 characters of base64url) as an array: the
// deny cache's key, built without allocating.
type tagKey [22]byte

// tagKeyOf is tag as a tagKey.
func tagKeyOf(tag string) (k tagKey) {
	copy(k[:], tag)
	return k
}

// hashValues is the keyed hash of dimensions and their values: 128 bits of
// HMAC-SHA256 (the deployment secret), base64url. It is the subject's tag:
// its keys' Redis Cluster hash tag, so every rule keyed on the same
// dimensions and values shares one slot.
func (g *Guard) hashValues(dims, values []string) string {
	m := g.macs.Get().(*macState)
	b := m.buf[:0]
	for i, dim := range dims {
		b = append(b, dim...)
		b = append(b, 0)
		b = append(b, values[i]...)
		b = append(b, 0)
	}
	k := m.tag(b)
	g.macs.Put(m)
	return string(k[:])
}

// valueHash names one value of a distinct rule's `of` dimension inside its
// set: 64 bits of keyed hash, enough to tell the values of one window apart.
func (g *Guard) valueHash(dim, value string) string { return g.labelHash("of", dim, value, 8) }

// valueKey is a distinct rule's value hash (valueHash) as an array: the
// deny cache's key, built without allocating.
type valueKey [11]byte

// valueKeyOf is valueHash(dim, the subject's value of dim) as a valueKey,
// the value formatted into the hash's buffer. The subject has dim.
func (g *Guard) valueKeyOf(dim string, s Subject) (k valueKey) {
	m := g.macs.Get().(*macState)
	b := append(m.buf[:0], "of"...)
	b = append(b, 0)
	b = append(b, dim...)
	b = append(b, 0)
	b = g.appendDimension(b, dim, s)
	base64.RawURLEncoding.Encode(k[:], m.sum(b)[:8])
	g.macs.Put(m)
	return k
}

// labelHash is the first n bytes (at most 16) of the keyed hash of label,
// dim and value, each but the last ended by a zero byte, base64url.
func (g *Guard) labelHash(label, dim, value string, n int) string {
	m := g.macs.Get().(*macState)
	b := append(m.buf[:0], label...)
	b = append(b, 0)
	b = append(b, dim...)
	b = append(b, 0)
	b = append(b, value...)
	var out [22]byte
	enc := out[:base64.RawURLEncoding.EncodedLen(n)]
	base64.RawURLEncoding.Encode(enc, m.sum(b)[:n])
	g.macs.Put(m)
	return string(enc)
}

// macState is a keyed HMAC-SHA256 with its input and output buffers, kept
// in a pool so that hashing a subject allocates nothing but the result.
type macState struct {
	h   hash.Hash
	buf []byte
	out [sha256.Size]byte
}

// sum is the HMAC of b, which becomes the state's input buffer.
func (m *macState) sum(b []byte) []byte {
	m.buf = b
	m.h.Reset()
	m.h.Write(b)
	return m.h.Sum(m.out[:0])
}

// tag is the subject tag of b: its HMAC's first 128 bits, base64url.
func (m *macState) tag(b []byte) (k tagKey) {
	base64.RawURLEncoding.Encode(k[:], m.sum(b)[:16])
	return k
}

// has reports whether the subject has a value for dim (as dimension would
// find, without formatting it).
func has(dim string, s Subject) bool {
	switch dim {
	case "destination":
		return s.Destination.Key != ""
	case "country":
		return s.Destination.Country != ""
	case "prefix":
		return s.Destination.Prefix != ""
	case "account":
		return s.Account != ""
	case "ip", "ip/56", "ip/48", "ip/24", "ip/16":
		return s.IP.IsValid()
	case "asn":
		return s.ASN != 0 || s.IP.IsValid()
	case "device":
		return s.Account != ""
	case "global":
		return true
	}
	return false
}

func (g *Guard) dimension(dim string, s Subject) (string, error) {
	if !has(dim, s) {
		return "", missing(dim)
	}
	switch dim {
	case "destination":
		return s.Destination.Key, nil
	case "country":
		return s.Destination.Country, nil
	case "prefix":
		return s.Destination.Prefix, nil
	case "account":
		return s.Account, nil
	case "global":
		return "", nil
	}
	return string(g.appendDimension(nil, dim, s)), nil
}

// appendDimension appends the subject's value of dim, as dimension
// returns it, to b. The subject has dim (has).
func (g *Guard) appendDimension(b []byte, dim string, s Subject) []byte {
	switch dim {
	case "destination":
		return append(b, s.Destination.Key...)
	case "country":
		return append(b, s.Destination.Country...)
	case "prefix":
		return append(b, s.Destination.Prefix...)
	case "account":
		return append(b, s.Account...)
	case "ip":
		return appendIPKey(b, s.IP, g.ipv6Bits)
	case "ip/56":
		return appendIPKey(b, s.IP, 56)
	case "ip/48":
		return appendIPKey(b, s.IP, 48)
	case "ip/24":
		return appendNetKey(b, s.IP, 24, 48)
	case "ip/16":
		return appendNetKey(b, s.IP, 16, 32)
	case "asn":
		if s.ASN != 0 {
			return strconv.AppendUint(append(b, "AS"...), uint64(s.ASN), 10)
		}
		if g.networks != nil {
			if n, ok := g.networks.ASN(s.IP); ok {
				return strconv.AppendUint(append(b, "AS"...), uint64(n), 10)
			}
		}
		// an address the database does not know counts as its network
		return appendNetKey(b, s.IP, 16, 48)
	case "device":
		// one state per (account, trusted device); the untrusted share one
		b = append(b, deviceAccount(s.Account)...)
		return append(append(b, 0), s.device...)
	}
	return b // global
}

func missing(dim string) error {
	return fmt.Errorf("%w: the request has no %s", ErrInvalidInput, dim)
}

// newID returns 96 random bits, base64url: lease and log-entry names.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Value is the subject's value of a dimension as the guard keys it
// (normalized; a network for ip/24 and the like), "" when it has none:
// for fingerprints in logs and events, never stored in clear.
func (g *Guard) Value(dim string, s Subject) string {
	v, _ := g.dimension(dim, s)
	return v
}

// Fingerprint names a subject in logs and metrics without revealing it:
// 72 bits of a keyed hash (the deployment secret) of the dimension and
// value, base64url: the same subject always has the same fingerprint, so
// its decisions can be followed through the logs.
func (g *Guard) Fingerprint(dimension, value string) string {
	if value == "" {
		return ""
	}
	return g.labelHash("log", dimension, value, 9)
}
