// Package idem implements idempotent requests (docs/http-api.md, "Idempotency") as command-bus
// middleware inside the business transaction, on the table idempotency_requests.
//
// # Assembly
//
//	keys, err := idem.ParseKeys(os.Getenv("FINGERPRINT_KEYS"))
//	metrics, err := idem.NewMetrics(prometheus.DefaultRegisterer)
//	guard, err := idem.New(idem.NewStore(), idem.Config{Keys: keys, Metrics: metrics})
//	b := bus.New(logging, postgres.TxMiddleware(pool, guard.Opening), guard.Middleware())
//
// The HTTP layer parses the key with ParseKey(r.Header.Values(idem.HeaderKey)), fills
// bus.Idempotency{Key, Method, Path: r.URL.Path, Fingerprint: {Body, Headers: Content-Type and
// If-Match}, Render}, writes Reply.Response exactly as returned (status, headers, body), adds
// Idempotent-Replayed: true when Reply.Replayed, and Idempotency-Retention:
// guard.RetentionHeader() on these endpoints. Errors are *domain.Error with the Code* constants.
//
// # Contracts
//
// The middleware must run inside the RLS transaction (after postgres.TxMiddleware in the chain;
// give that middleware guard.Opening, and the claim of a fresh key travels with the BEGIN):
// the Store uses only the transaction from the context and refuses to run without one, so every
// statement is confined to the actor's workspace by RLS. The record, the business rows, the
// operation and the outbox rows commit together or not at all: when the handler, the rendering
// or the commit fails, no record remains and the key may be used again.
//
// Concurrency: a transaction owns a scope (workspace, user, method, normalized path, key) by
// holding pg_try_advisory_xact_lock on a 64-bit hash of it until it ends. A request that finds
// the lock taken is answered at once (a committed completed record is replayed; otherwise 409
// IDEMPOTENCY_REQUEST_IN_PROGRESS with Retry-After); it never waits for the other transaction.
// The lock and the read of the scope's record are one statement; under READ COMMITTED, a record
// committed between that statement's snapshot and the lock is caught at the commit by the
// unique constraint on the scope (the record's plain INSERT waits for its writer), and the
// request runs again and answers from it, so exactly one request executes.
//
// Stored: the scope, the fingerprint (HMAC-SHA256 with a server secret, and the id of that
// secret), the status, and the response exactly as the client received it: status, the
// headers named in Config.StoredHeaders, and the body, bounded by Config.MaxResponseBytes (a
// larger response fails; nothing truncated is stored). Never stored: the request body, any
// plain hash of it, request headers, secrets. Responses must not carry secrets (RenderFunc's
// contract). Errors and logs of this package never contain secrets or bodies.
//
// Fingerprint: method, normalized path, semantic headers (Content-Type normalized: media type
// and parameter names lowercased, charset lowercased, parameters sorted; other headers such as
// If-Match trimmed only; empty ≡ absent) and the body. A JSON body (Content-Type JSON or
// absent) is normalized by meaning: key order, white space and number spelling (1, 1.0, 1e0)
// do not matter, strings compare exactly after escapes. An empty body is {}, matching the HTTP
// layer's decoder. Other bodies, and JSON that cannot be normalized safely (invalid, duplicate
// keys, deep nesting), are taken byte for byte. Several keys may be configured: the first makes
// new fingerprints, all of them verify records that name them (rotation). MACs are compared in
// constant time.
//
// Retention: expires_at = now() + Config.Retention (default 48 h, at least 24 h). An expired
// record that the cleanup has not deleted yet counts as absent. Cleaner deletes expired
// records per workspace in small RLS transactions, without BYPASSRLS.
package idem
