// Package fetch is the SSRF-guarded HTTP(S) downloader behind port.Fetcher, used by material
// transfers.
//
// The guard: only http and https URLs without user info. Every address is judged by one
// table-driven function, Allowed, built from the IANA IPv4 and IPv6 special-purpose address
// registries (every row; "Globally Reachable: False" and "N/A" refused), plus multicast,
// IPv4-translated ::ffff:0:0:0/96 and IPv4-compatible ::/96; 192.0.0.0/24, 2001::/32 and
// 64:ff9b:1::/48 are refused whole, IPv6 outside 2000::/3 is refused, and the IPv4 address
// inside ::ffff:0:0/96, 64:ff9b::/96 and 2002::/16 is judged in turn. CheckURL (a request's
// validation) refuses literal addresses and localhost names without DNS; host names are
// resolved and checked only when Fetch connects, on the very address being connected
// (net.Dialer.Control), so DNS rebinding, redirects and the environment's proxy settings
// (ignored: no proxy is used) cannot route around it. Redirects are limited (default 5) and
// each one is checked the same way.
//
// Exceptions: AllowURLPrefixes (FETCH_ALLOW_PREFIXES) names URL prefixes, such as the
// development sandbox's sample image, that may reach any address; those fetches use
// connections of their own and follow redirects only within the prefixes. AllowNetworks
// exempts address ranges.
//
// Limits: a total time limit covers connecting, redirects and reading the body; a body longer
// than maxBytes fails with port.ErrSourceTooLarge (at once when Content-Length says so).
// AllowPrivate (FETCH_ALLOW_PRIVATE=true) lifts the address guard for tests; the scheme and
// limit checks stay.
//
// Errors are *domain.Error values with the public codes SOURCE_URL_INVALID,
// SOURCE_URL_FORBIDDEN, SOURCE_TOO_LARGE, SOURCE_UNREACHABLE and SOURCE_REJECTED (see port),
// wrapped with the operation; they never quote the URL's query string or user info.
package fetch
