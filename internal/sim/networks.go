package sim

import (
	"fmt"
	"net/netip"
)

// networks is the simulated Internet's ASN database (guard.Networks):
// each big ISP's /16s and IPv6 /32 are one autonomous system, each mobile
// carrier one, the business ISPs of the offices four, and the attackers'
// hosting providers ten per attack; the "elsewhere" users' small networks
// are unknown to it (they count by their /16). A config uses it only with
// rules on asn (network.asnDatabase set).
type networks struct {
	by map[string]uint32 // "a.b" (IPv4 /16) or "xxxx:yyyy" (IPv6 /32) -> AS
}

func newNetworks() *networks {
	n := &networks{by: map[string]uint32{}}
	for k := range ispNets {
		n.by[fmt.Sprintf("%d.%d", 60+k/2, 10+(k*37)%200)] = 64600 + uint32(k/4)
	}
	for k := range mobileCarrier {
		n.by[fmt.Sprintf("172.%d", 56+k)] = 64700 + uint32(k)
	}
	for o := range 20 {
		n.by[fmt.Sprintf("38.%d", 100+o)] = 64800 + uint32(o/5)
	}
	for p := range ipv6Providers {
		n.by[fmt.Sprintf("2a02:%x", 0x1000+p)] = 64600 + uint32(p)
	}
	return n
}

// add files a /16 or /32 under an AS.
func (n *networks) add(net string, asn uint32) { n.by[net] = asn }

// ASN implements guard.Networks.
func (n *networks) ASN(a netip.Addr) (uint32, bool) {
	var key string
	if a.Is4() {
		b := a.As4()
		key = fmt.Sprintf("%d.%d", b[0], b[1])
	} else {
		b := a.As16()
		key = fmt.Sprintf("%x:%x", uint16(b[0])<<8|uint16(b[1]), uint16(b[2])<<8|uint16(b[3]))
	}
	asn, ok := n.by[key]
	return asn, ok
}
