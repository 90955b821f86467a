// Package fetch is the SSRF-guarded HTTP(S) downloader behind port.Fetcher, used by material
// transfers.
//
// The guard: only http and https URLs without user info; the host is resolved and every
// address is checked against a deny list (loopback, RFC 1918 private, link-local including
// 169.254.169.254, unspecified, multicast, broadcast, CGNAT 100.64/10, benchmarking,
// documentation and reserved ranges, IPv6 unique-local, site-local, discard, Teredo, and the
// IPv4-mapped, IPv4-compatible, NAT64 and 6to4 forms of a denied IPv4 address). The check runs
// again at dial time on the very address being connected (net.Dialer.Control), so DNS
// rebinding, redirects and the environment's proxy settings (ignored: no proxy is used) cannot
// route around it. Redirects are limited (default 5) and each one is checked the same way.
//
// Limits: a total time limit covers connecting, redirects and reading the body; a body longer
// than maxBytes fails with port.ErrSourceTooLarge (at once when Content-Length says so).
// AllowPrivate (FETCH_ALLOW_PRIVATE=true) lifts the address deny list for development and
// tests; the scheme and limit checks stay.
//
// Errors are *domain.Error values with the public codes SOURCE_URL_INVALID,
// SOURCE_URL_FORBIDDEN, SOURCE_TOO_LARGE, SOURCE_UNREACHABLE and SOURCE_REJECTED (see port),
// wrapped with the operation; they never quote the URL's query string or user info.
package fetch
