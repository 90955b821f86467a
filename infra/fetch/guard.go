package fetch

import (
	"net/netip"
)

// denied lists the prefixes a fetch may never reach (IPv4 after unmapping).
var denied = mustPrefixes(
	// IPv4
	"0.0.0.0/8",          // "this network", unspecified
	"10.0.0.0/8",         // private
	"100.64.0.0/10",      // CGNAT shared address space
	"127.0.0.0/8",        // loopback
	"169.254.0.0/16",     // link-local, cloud metadata (169.254.169.254)
	"172.16.0.0/12",      // private
	"192.0.0.0/24",       // IETF protocol assignments
	"192.0.2.0/24",       // TEST-NET-1
	"192.88.99.0/24",     // 6to4 relay anycast
	"192.168.0.0/16",     // private
	"198.18.0.0/15",      // benchmarking
	"198.51.100.0/24",    // TEST-NET-2
	"203.0.113.0/24",     // TEST-NET-3
	"224.0.0.0/4",        // multicast
	"240.0.0.0/4",        // reserved, broadcast
	"255.255.255.255/32", // broadcast
	// IPv6
	"::/128",        // unspecified
	"::1/128",       // loopback
	"::/96",         // IPv4-compatible (deprecated)
	"100::/64",      // discard
	"2001::/32",     // Teredo
	"2001:2::/48",   // benchmarking
	"2001:db8::/32", // documentation
	"2001:10::/28",  // ORCHID
	"fc00::/7",      // unique local
	"fe80::/10",     // link-local
	"fec0::/10",     // site-local (deprecated)
	"ff00::/8",      // multicast
)

var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour  = netip.MustParsePrefix("2002::/16")
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// forbidden reports whether a may not be dialed. allow lists exceptions (Config.AllowPrefixes).
func forbidden(a netip.Addr, allow []netip.Prefix) bool {
	if !a.IsValid() || a.Zone() != "" {
		return true
	}
	a = a.Unmap() // ::ffff:a.b.c.d → a.b.c.d
	for _, p := range allow {
		if p.Contains(a) {
			return false
		}
	}
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range denied {
		if p.Contains(a) {
			return true
		}
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			return forbidden(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), nil)
		case nat64Local.Contains(a):
			return true
		case sixToFour.Contains(a):
			return forbidden(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), nil)
		}
	}
	return false
}
