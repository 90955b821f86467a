// Package clientkey names the client a request comes from for the limits that count per
// client (the API's logins, the console's sign-ins): its peer address, forwarded headers
// not trusted, an IPv6 client as its /64 (one subscriber's usual allocation, so a client
// cannot pass a per-address limit by hopping within its own prefix).
package clientkey

import (
	"net"
	"net/netip"
)

// MaxLength bounds a key (the client columns of the limit tables).
const MaxLength = 100

// Of returns the key of the client at remoteAddr (an http.Request's RemoteAddr: host:port or
// a bare host): an IPv4 address as itself (an IPv4-mapped IPv6 address too), an IPv6
// address as its /64 prefix ("2001:db8:1:2::/64"), zones dropped; anything that is not an
// address is cut to MaxLength bytes. Never empty for a non-empty remoteAddr.
func Of(remoteAddr string) string {
	h := remoteAddr
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		h = host
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		if len(h) > MaxLength {
			h = h[:MaxLength]
		}
		return h
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
