package guard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/otpguard/otpguard/guard/store"
)

// Trusted devices (OWASP's device cookies, docs/contract.md §7). A device
// token is issued for an account when a login succeeds or a code for the
// login and reset purposes is approved; a client that presents it later
// is a device that has proven the account before. It is
//
//	base64url( version 1 | device id (12 random bytes) | issued at (µs,
//	           store time, 8 bytes big-endian) | 16 bytes of HMAC-SHA256 )
//
// the HMAC keyed with a key derived from the deployment secret, over the
// rest and the account (lower-cased), so it is worth nothing for another
// account and cannot be made without the secret. Its expiry and its
// revocation are the store's to judge, in the decision's own round trip:
// the token is trusted while its issue time is after the account's last
// revocation (og:{tag}dv) and the store's clock is before issue + ttl.

const (
	deviceVersion = 1
	deviceIDLen   = 12
	deviceMACLen  = 16
	deviceRawLen  = 1 + deviceIDLen + 8 + deviceMACLen
)

// devices issues and verifies device tokens.
type devices struct {
	key     []byte
	ttl     time.Duration
	spec    *store.Spec
	revoked *revocations
}

// revocations are the revocation times of the accounts this process
// revoked, as the store answered them (µs), by device tag: a token it
// issues with no time afterwards is issued after them when its estimate
// of the store's time is behind by up to revocationLead (an answer read
// late, a clock sample lower than the last). Further behind, the store's
// clock stepped back (a failover) or answered a time far ahead: the token
// is issued at the estimate, and is untrusted until the store's clock
// passes the revocation (never a lifetime stretched by a bad time; a
// revocation never moves back in the store, so one made later revokes
// tokens issued at a time remembered here). Bounded: forgotten all at
// once when full (the tokens issued after are then issued at the
// estimate).
type revocations struct {
	mu sync.Mutex
	m  map[string]int64
}

const (
	maxRevocations = 4096
	revocationLead = time.Second
)

func (r *revocations) note(tag string, at time.Time) {
	if at.IsZero() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxRevocations {
		r.m = map[string]int64{}
	}
	r.m[tag] = max(r.m[tag], at.UnixMicro())
}

// after is at, or 1µs after tag's revocation when at is not later.
func (r *revocations) after(tag string, at time.Time) time.Time {
	r.mu.Lock()
	rv, ok := r.m[tag]
	r.mu.Unlock()
	if us := at.UnixMicro(); ok && us <= rv && rv-us <= revocationLead.Microseconds() {
		return time.UnixMicro(rv + 1)
	}
	return at
}

func newDevices(secret []byte, ttl time.Duration) devices {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("otpguard device tokens v1"))
	return devices{key: m.Sum(nil), ttl: ttl, spec: &store.Spec{ID: "dv", Algorithm: store.Devices, Window: ttl}, revoked: &revocations{}}
}

// deviceAccount is the form of an account a device token is bound to:
// trimmed and lower-cased, so that the address a code was approved for
// and the username a login gives name the same account.
func deviceAccount(account string) string { return strings.ToLower(strings.TrimSpace(account)) }

func (d devices) mac(account string, payload []byte) []byte {
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte(deviceAccount(account)))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)[:deviceMACLen]
}

// DeviceToken returns a device token for account, issued at at (the
// store's time: a Decision's At; zero: the store's time as last seen,
// through Options.StoreClock, and after every revocation of the account
// this process made). presented is the device token the client
// presented: when it was made for account, the new token keeps its
// device id (a login from a known device renews its token); any other
// token (none, forged, malformed, another account's) draws a new id.
// Whether presented has expired or was revoked does not matter here: only
// a decision trusts a device.
func (g *Guard) DeviceToken(account, presented string, at time.Time) (string, error) {
	if deviceAccount(account) == "" {
		return "", fmt.Errorf("%w: a device token needs an account", ErrInvalidInput)
	}
	if at.IsZero() {
		at = time.Now()
		if g.storeClk != nil {
			at = g.storeClk.Now()
		}
		at = g.devices.revoked.after(g.deviceTag(account), at)
	}
	id := make([]byte, deviceIDLen)
	if kept, _, ok := g.devices.verify(presented, account); ok {
		id, _ = base64.RawURLEncoding.DecodeString(kept) // verify's: deviceIDLen bytes
	} else {
		_, _ = rand.Read(id)
	}
	raw := make([]byte, 0, deviceRawLen)
	raw = append(raw, deviceVersion)
	raw = append(raw, id...)
	raw = binary.BigEndian.AppendUint64(raw, uint64(at.UnixMicro()))
	raw = append(raw, g.devices.mac(account, raw)...)
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// verify checks a token's MAC for account: its device id and issue time.
func (d devices) verify(token, account string) (id string, issued time.Time, ok bool) {
	if token == "" || len(token) > 2*deviceRawLen || deviceAccount(account) == "" {
		return "", time.Time{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) != deviceRawLen || raw[0] != deviceVersion {
		return "", time.Time{}, false
	}
	body, sum := raw[:deviceRawLen-deviceMACLen], raw[deviceRawLen-deviceMACLen:]
	if !hmac.Equal(sum, d.mac(account, body)) {
		return "", time.Time{}, false
	}
	us := int64(binary.BigEndian.Uint64(body[1+deviceIDLen:]))
	if us <= 0 {
		return "", time.Time{}, false
	}
	return base64.RawURLEncoding.EncodeToString(body[1 : 1+deviceIDLen]), time.UnixMicro(us), true
}

// deviceTag is the tag of an account's device state.
func (g *Guard) deviceTag(account string) string {
	return g.hashValues([]string{"devices"}, []string{deviceAccount(account)})
}

// RevokeDevices revokes every device token issued for account until now
// (the store's clock): its devices are untrusted until they log in again.
func (g *Guard) RevokeDevices(ctx context.Context, account string) error {
	if deviceAccount(account) == "" {
		return fmt.Errorf("%w: an account is required", ErrInvalidInput)
	}
	op := store.Op{Kind: store.Revoke, Spec: g.devices.spec, Tag: g.deviceTag(account), Cost: 1}
	if g.backstop != nil {
		// first, so that it holds here even while the store fails
		_, _ = g.do(ctx, g.backstop, []store.Op{op}) // in memory: it does not fail
	}
	// (only the store's answer is remembered: the backstop's time is this
	// process's estimate, which a bad answer may have put far ahead)
	res, err := g.do(ctx, g.store, []store.Op{op})
	if err != nil {
		return fmt.Errorf("revoke devices: %w", err)
	}
	g.devices.revoked.note(op.Tag, res[0].Now)
	return nil
}

// dependsOnDevice reports whether a rule is filtered or keyed on the
// device.
func dependsOnDevice(rules []*rule) bool {
	for _, r := range rules {
		if r.filtersDevice || r.keyedDevice {
			return true
		}
	}
	return false
}
