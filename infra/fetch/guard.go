package fetch

import (
	"net/netip"
)

// verdict is what the guard does with an address inside a class.
type verdict uint8

const (
	// refuse: never dialed.
	refuse verdict = iota
	// allow: globally reachable.
	allow
	// embedded: the address carries an IPv4 address (at byte offset embedAt of its 16
	// bytes), which is classified in turn.
	embedded
)

// class is one row of the address classification: a prefix, its registry name, and the
// guard's verdict for the addresses in it.
type class struct {
	prefix netip.Prefix
	name   string
	// source names the registry row or the RFC of a row the registries do not list.
	source  string
	verdict verdict
	// whole: the verdict covers the whole prefix, more specific rows inside it included
	// (the registry's globally reachable /32s inside 192.0.0.0/24, for instance).
	whole   bool
	embedAt int
}

// classes is the address classification: every row of the IANA IPv4 and IPv6
// special-purpose address registries (iana-ipv4-special-registry and
// iana-ipv6-special-registry, as of 2025-05), with "Globally Reachable: False" or "N/A"
// refused and "True" allowed, plus the rows marked "extra" that the registries do not list.
// An address matches its most specific row, unless a row marked whole contains it.
var classes = []class{
	// IPv4 special-purpose registry.
	{prefix: p("0.0.0.0/8"), name: `"This network"`, source: "RFC 791", verdict: refuse},
	{prefix: p("0.0.0.0/32"), name: `"This host on this network"`, source: "RFC 1122", verdict: refuse},
	{prefix: p("10.0.0.0/8"), name: "Private-Use", source: "RFC 1918", verdict: refuse},
	{prefix: p("100.64.0.0/10"), name: "Shared Address Space", source: "RFC 6598", verdict: refuse},
	{prefix: p("127.0.0.0/8"), name: "Loopback", source: "RFC 1122", verdict: refuse},
	{prefix: p("169.254.0.0/16"), name: "Link Local", source: "RFC 3927", verdict: refuse},
	{prefix: p("172.16.0.0/12"), name: "Private-Use", source: "RFC 1918", verdict: refuse},
	// Registry: 192.0.0.0/24 is not globally reachable "unless by virtue of a more specific
	// reservation" (192.0.0.9, 192.0.0.10); refused whole all the same.
	{prefix: p("192.0.0.0/24"), name: "IETF Protocol Assignments", source: "RFC 6890", verdict: refuse, whole: true},
	{prefix: p("192.0.0.0/29"), name: "IPv4 Service Continuity Prefix", source: "RFC 7335", verdict: refuse},
	{prefix: p("192.0.0.8/32"), name: "IPv4 dummy address", source: "RFC 7600", verdict: refuse},
	{prefix: p("192.0.0.9/32"), name: "Port Control Protocol Anycast", source: "RFC 7723", verdict: allow},
	{prefix: p("192.0.0.10/32"), name: "Traversal Using Relays around NAT Anycast", source: "RFC 8155", verdict: allow},
	{prefix: p("192.0.0.170/32"), name: "NAT64/DNS64 Discovery", source: "RFC 8880", verdict: refuse},
	{prefix: p("192.0.0.171/32"), name: "NAT64/DNS64 Discovery", source: "RFC 8880", verdict: refuse},
	{prefix: p("192.0.2.0/24"), name: "Documentation (TEST-NET-1)", source: "RFC 5737", verdict: refuse},
	{prefix: p("192.31.196.0/24"), name: "AS112-v4", source: "RFC 7535", verdict: allow},
	{prefix: p("192.52.193.0/24"), name: "AMT", source: "RFC 7450", verdict: allow},
	{prefix: p("192.88.99.0/24"), name: "Deprecated (6to4 Relay Anycast)", source: "RFC 7526", verdict: refuse},
	{prefix: p("192.168.0.0/16"), name: "Private-Use", source: "RFC 1918", verdict: refuse},
	{prefix: p("192.175.48.0/24"), name: "Direct Delegation AS112 Service", source: "RFC 7534", verdict: allow},
	{prefix: p("198.18.0.0/15"), name: "Benchmarking", source: "RFC 2544", verdict: refuse},
	{prefix: p("198.51.100.0/24"), name: "Documentation (TEST-NET-2)", source: "RFC 5737", verdict: refuse},
	{prefix: p("203.0.113.0/24"), name: "Documentation (TEST-NET-3)", source: "RFC 5737", verdict: refuse},
	{prefix: p("240.0.0.0/4"), name: "Reserved", source: "RFC 1112", verdict: refuse, whole: true},
	{prefix: p("255.255.255.255/32"), name: "Limited Broadcast", source: "RFC 919", verdict: refuse},
	// IPv4 extra: multicast is in the multicast registry, not the special-purpose one.
	{prefix: p("224.0.0.0/4"), name: "Multicast (extra)", source: "RFC 5771", verdict: refuse},

	// IPv6 special-purpose registry.
	{prefix: p("::1/128"), name: "Loopback Address", source: "RFC 4291", verdict: refuse},
	{prefix: p("::/128"), name: "Unspecified Address", source: "RFC 4291", verdict: refuse},
	// Registry: not globally reachable; it is how an IPv4 address looks in IPv6 sockets and
	// resolver answers, so the IPv4 address inside is classified.
	{prefix: p("::ffff:0:0/96"), name: "IPv4-mapped Address", source: "RFC 4291", verdict: embedded, embedAt: 12},
	{prefix: p("64:ff9b::/96"), name: "IPv4-IPv6 Translat.", source: "RFC 6052", verdict: embedded, embedAt: 12},
	{prefix: p("64:ff9b:1::/48"), name: "IPv4-IPv6 Translat.", source: "RFC 8215", verdict: refuse, whole: true},
	{prefix: p("100::/64"), name: "Discard-Only Address Block", source: "RFC 6666", verdict: refuse},
	{prefix: p("100:0:0:1::/64"), name: "Dummy IPv6 Prefix", source: "RFC 9780", verdict: refuse},
	{prefix: p("2001::/23"), name: "IETF Protocol Assignments", source: "RFC 2928", verdict: refuse},
	// Registry: Teredo is N/A (it depends on the relay); refused whole.
	{prefix: p("2001::/32"), name: "TEREDO", source: "RFC 4380", verdict: refuse, whole: true},
	{prefix: p("2001:1::1/128"), name: "Port Control Protocol Anycast", source: "RFC 7723", verdict: allow},
	{prefix: p("2001:1::2/128"), name: "Traversal Using Relays around NAT Anycast", source: "RFC 8155", verdict: allow},
	{prefix: p("2001:1::3/128"), name: "DNS-SD Service Registration Protocol Anycast", source: "RFC 9665", verdict: allow},
	{prefix: p("2001:2::/48"), name: "Benchmarking", source: "RFC 5180", verdict: refuse},
	{prefix: p("2001:3::/32"), name: "AMT", source: "RFC 7450", verdict: allow},
	{prefix: p("2001:4:112::/48"), name: "AS112-v6", source: "RFC 7535", verdict: allow},
	{prefix: p("2001:10::/28"), name: "Deprecated (previously ORCHID)", source: "RFC 4843", verdict: refuse},
	{prefix: p("2001:20::/28"), name: "ORCHIDv2", source: "RFC 7343", verdict: allow},
	{prefix: p("2001:30::/28"), name: "Drone Remote ID Protocol Entity Tags (DETs) Prefix", source: "RFC 9374", verdict: allow},
	{prefix: p("2001:db8::/32"), name: "Documentation", source: "RFC 3849", verdict: refuse},
	// Registry: 6to4 is N/A; the IPv4 address it carries is classified.
	{prefix: p("2002::/16"), name: "6to4", source: "RFC 3056", verdict: embedded, embedAt: 2},
	{prefix: p("2620:4f:8000::/48"), name: "Direct Delegation AS112 Service", source: "RFC 7534", verdict: allow},
	{prefix: p("3fff::/20"), name: "Documentation", source: "RFC 9637", verdict: refuse},
	{prefix: p("5f00::/16"), name: "Segment Routing (SRv6) SIDs", source: "RFC 9602", verdict: refuse},
	{prefix: p("fc00::/7"), name: "Unique-Local", source: "RFC 4193", verdict: refuse},
	{prefix: p("fe80::/10"), name: "Link-Local Unicast", source: "RFC 4291", verdict: refuse},
	// IPv6 extra.
	{prefix: p("::ffff:0:0:0/96"), name: "IPv4-translated Address (extra)", source: "RFC 2765", verdict: refuse, whole: true},
	{prefix: p("::/96"), name: "IPv4-compatible Address (extra)", source: "RFC 4291", verdict: refuse, whole: true},
	{prefix: p("fec0::/10"), name: "Site-Local (extra)", source: "RFC 3879", verdict: refuse},
	{prefix: p("ff00::/8"), name: "Multicast (extra)", source: "RFC 4291", verdict: refuse},
}

// globalUnicast is the only IPv6 space IANA allocates for global unicast: an IPv6 address
// outside it that no row names is refused.
var globalUnicast = p("2000::/3")

func p(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// classify returns the row deciding a (ok false when no row contains a): a row marked whole
// that contains a, else the most specific row that does.
func classify(a netip.Addr) (c class, ok bool) {
	for _, r := range classes {
		if r.whole && r.prefix.Contains(a) {
			return r, true
		}
	}
	for _, r := range classes {
		if r.prefix.Contains(a) && (!ok || r.prefix.Bits() > c.prefix.Bits()) {
			c, ok = r, true
		}
	}
	return c, ok
}

// Allowed reports whether a fetch may connect to a: valid, without zone, and globally
// reachable by the classification above (an IPv4 address inside ::ffff:0:0/96, 64:ff9b::/96
// or 2002::/16 is judged as that IPv4 address). It is the one check used when a URL is
// validated and on every address right before connect.
func Allowed(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	c, ok := classify(a)
	if !ok {
		return a.Is4() || globalUnicast.Contains(a)
	}
	switch c.verdict {
	case allow:
		return true
	case embedded:
		b := a.As16()
		return Allowed(netip.AddrFrom4([4]byte(b[c.embedAt : c.embedAt+4])))
	default:
		return false
	}
}

// forbidden reports whether a may not be dialed; allowNets are exceptions
// (Config.AllowNetworks).
func forbidden(a netip.Addr, allowNets []netip.Prefix) bool {
	for _, n := range allowNets {
		if n.Contains(a.Unmap()) {
			return false
		}
	}
	return !Allowed(a)
}
