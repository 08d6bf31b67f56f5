package api

import (
	"strings"

	"github.com/otpguard/otpguard/guard"
	"github.com/otpguard/otpguard/guard/message"
)

// mask shows enough of a destination for a user to recognize it and not
// enough to read it off a screenshot: a***@example.com, +4*******23.
func mask(d guard.Destination) string {
	switch d.Channel {
	case message.Email:
		local, domain, _ := strings.Cut(d.Address, "@")
		if local == "" {
			return "***@" + domain
		}
		return local[:1] + "***@" + domain
	default:
		n := d.Address
		if len(n) <= 5 {
			return strings.Repeat("*", len(n))
		}
		return n[:2] + strings.Repeat("*", len(n)-4) + n[len(n)-2:]
	}
}
