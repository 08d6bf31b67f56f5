package api

import (
	"net/http"
	"net/netip"
	"strings"
)

// clientIP returns the address a request counts against: the connection's
// peer (r.RemoteAddr; the Lambda adapter sets it from
// requestContext.http.sourceIp). Only when the peer is a trusted proxy are
// X-Forwarded-For hops read, right to left, and the first one that is not
// itself a trusted proxy is the client. ok is false when no address can be
// determined (the request is then refused, never left unlimited).
func clientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
	peer, ok := parseHost(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !inAny(peer, trusted) {
		return peer, true
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHost(strings.TrimSpace(hops[i]))
		if !ok {
			// A hop we cannot read was written by the client or an
			// untrusted hop: the last trusted one saw this sender.
			return addr, true
		}
		addr = a
		if !inAny(a, trusted) {
			return a, true
		}
	}
	return addr, true
}

// parseHost reads "ip", "ip:port" or "[ipv6]:port"; IPv4-mapped IPv6
// becomes IPv4.
func parseHost(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func inAny(a netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
