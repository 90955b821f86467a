// Package sandbox holds what the in-memory sandboxes of external systems share: a small
// server runner for `app all` (Start), fault injection (Faults) and JSON helpers. The
// sandboxes themselves live in marketplace and aiprovider; each is an http.Handler that speaks
// its protocol faithfully, so the real HTTP adapters run against them in development and in
// tests.
//
// Sandboxes are for development and tests only: their /_sandbox/ admin endpoints are
// unauthenticated. They never log request headers (the Authorization header carries keys) or
// bodies.
package sandbox
