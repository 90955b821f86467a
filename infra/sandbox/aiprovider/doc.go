// Package aiprovider is an in-memory sandbox of the OpenAI-compatible API subset the service
// uses (POST /v1/chat/completions, POST /v1/images/generations), an http.Handler for
// development (`app all` starts it when AI_BASE_URL is unset) and tests.
//
// Answers are deterministic: a chat completion's content is Config.ReplyFunc(model, prompt)
// (by default a short sentence quoting the prompt), usage counts roughly four bytes per token,
// and an image is a small PNG whose color derives from the prompt. Response ids and
// x-request-id count executions ("chatcmpl-sbx-000001", "req_sbx_000001").
//
// Idempotency-Key: the same key with the same body returns the saved response byte for byte
// (same id, same usage, header Idempotent-Replayed: true) without a new execution; with another
// body, 409. Calls counts every request; Executions counts what a real provider would bill.
//
// Auth: "Authorization: Bearer <key>"; Config.APIKeys lists accepted keys (default: any
// non-empty key); others get 401 in OpenAI's error shape.
//
// Admin endpoints (no auth; development only): GET /_sandbox/stats, POST /_sandbox/faults
// (see sandbox.Fault), POST /_sandbox/settings {"latency_ms": n}, POST /_sandbox/reset.
// Neither headers nor prompts are logged: one debug line per call with endpoint and status.
package aiprovider
