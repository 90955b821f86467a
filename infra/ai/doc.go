// Package ai is the adapter of an OpenAI-compatible provider; it implements port.AIProvider
// with POST /v1/chat/completions and POST /v1/images/generations.
//
// Every call sends "Authorization: Bearer <AI_API_KEY>" and the caller's Idempotency-Key (the
// AI task's key), so a provider that honors it answers a redelivered task from its cache
// without running or billing the model twice. The returned port.Usage is what the provider
// reported, for the one ledger row per task.
//
// Error mapping: 401/403 → port.ErrAIUnauthorized; 429 → *port.RateLimitedError matching
// port.ErrAIRateLimited (except "insufficient_quota", which is port.ErrAIRejected); 408, 5xx,
// timeouts, network failures and unreadable 2xx bodies → port.ErrAITransient; other 4xx →
// port.ErrAIRejected. Error strings carry the operation, the status and a bounded, sanitized
// snippet of the provider's error (key masked); prompts and outputs are never logged.
package ai
