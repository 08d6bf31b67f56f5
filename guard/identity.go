package guard

import (
	"errors"
	"net/netip"

	"github.com/otpguard/otpguard/guard/message"
)

// ErrInvalidInput is wrapped by every error about a malformed identifier,
// so callers can answer 400 without string matching.
var ErrInvalidInput = errors.New("invalid input")

// Destination is a normalized email address or phone number (guard/identity
// reads them).
type Destination struct {
	Channel message.Channel
	// Address is where messages go: an email as typed with its domain
	// normalized, or a phone number in E.164.
	Address string
	// Key is what rules count by: the email with case, +tags and Gmail
	// dots folded away, or the E.164 number.
	Key string
	// Country is the phone number's ISO 3166 region (SMS only).
	Country string
	// Prefix is the E.164 number without its last 4 digits (SMS only).
	Prefix string
	// Type is the phone number type, a name otp.sms.allowedTypes takes (SMS only).
	Type string
}

// IsZero reports whether d holds no destination.
func (d Destination) IsZero() bool { return d.Key == "" }

// ipKey returns the network an address is counted by: IPv4 as /32, IPv6 as
// its first bits bits (64 for the ip dimension, 56 and 48 for ip/56 and
// ip/48).
func ipKey(a netip.Addr, bits int) string { return string(appendIPKey(nil, a, bits)) }

// appendIPKey appends ipKey(a, bits) to b.
func appendIPKey(b []byte, a netip.Addr, bits int) []byte {
	a = a.Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32).AppendTo(b)
	}
	p, _ := a.WithZone("").Prefix(bits)
	return p.AppendTo(b)
}

// appendNetKey appends the network an address is counted by for the
// network dimensions to b: an IPv4 address by its first v4 bits (24 for
// ip/24, 16 for ip/16), an IPv6 one by its first v6 bits (48 and 32: the
// networks of a site and of a provider).
func appendNetKey(b []byte, a netip.Addr, v4, v6 int) []byte {
	a = a.Unmap()
	bits := v6
	if a.Is4() {
		bits = v4
	}
	p, _ := a.WithZone("").Prefix(bits)
	return p.AppendTo(b)
}
