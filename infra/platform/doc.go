// Package platform is the HTTP adapter of the marketplace gateway protocol
// (docs/external-systems.md); it implements port.Marketplace.
//
// Every call sends the store's api_key as "Authorization: Bearer <api_key>" and nowhere else
// (not in URLs, bodies, errors or logs). POST /v1/products also sends the caller's
// Idempotency-Key.
//
// Error mapping (errors.Is on the port sentinels; errors.As for *port.RateLimitedError):
//
//	401, 403                   → port.ErrPlatformUnauthorized (VerifyStore: Valid=false instead)
//	429 (+ Retry-After)        → *port.RateLimitedError{RetryAfter} matching port.ErrPlatformRateLimited
//	408, 5xx, timeouts, network,
//	an unreadable 2xx body     → port.ErrPlatformTransient (for a create: outcome unknown)
//	other 4xx                  → port.ErrPlatformRejected (the calling method sees its status:
//	                             a repeat DELETE's 404 is reported as done)
//
// Error strings carry the operation, the HTTP status and at most a bounded, sanitized snippet
// of the gateway's error code and message (with the api key masked should a gateway echo it);
// never a request body or the key. One debug log line per call names the operation, path,
// status and duration.
package platform
