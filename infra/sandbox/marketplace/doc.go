// Package marketplace is an in-memory sandbox of the marketplace gateway protocol
// (docs/external-systems.md), an http.Handler for development (`app all` starts it when
// PLATFORM_BASE_URL is unset) and tests.
//
// Protocol, all with "Authorization: Bearer <api_key>":
//
//	POST /v1/stores/verify {platform, shop_id} → 200 {valid, shop_name, reason}
//	POST /v1/products {external_ref, title, description, price, currency, images}
//	     with Idempotency-Key → 201 {id, external_ref, …}
//	PUT  /v1/products/{id} {external_ref, title, description, price, currency, images}
//	     with Idempotency-Key → 200 {id, external_ref, …} (replaces the content; 404 unknown id)
//	DELETE /v1/products/{id} → 200 {id, deleted: true}; 404 when there is no such product
//	     (a repeat delete)
//	GET  /v1/products?external_ref=<ref> → 200 {items: [...]}
//	GET  /v1/products?limit=<n>&page_token=<t> → 200 {items: [...], next_page_token}
//	errors: 400 bad request, 401 bad key, 409 Idempotency-Key reused with another body,
//	        429 with Retry-After, 5xx (injected) — body {"error": {"code", "message"}}
//
// An api key is a shop: products are kept per key. Accepted keys are configurable (default:
// those starting with "sk_test_"); a key starting with "sk_test_invalid" verifies as
// valid:false and gets 401 elsewhere; any other key gets 401 everywhere.
//
// Idempotency-Key on POST /v1/products: the same key (per api key) with the same body returns
// the saved 201 response again without creating anything; with another body, 409. On PUT
// /v1/products/{id} likewise (keys apart from the POSTs'): the same key, product and body
// return the saved 200 response without applying the content again. The IgnoreIdempotencyKey
// switch makes the sandbox behave like a gateway that ignores the header (every POST creates
// a product, every PUT applies), to prove that workers dedupe on their own. Product (a Go
// method) reads a product's current content, for tests.
//
// Admin endpoints for tests and development (no auth; development only):
//
//	GET  /_sandbox/stats     calls per endpoint, products per external_ref, totals
//	GET  /_sandbox/files/mug.png  a sample PNG (the walkthrough's material transfer)
//	POST /_sandbox/settings  {"ignore_idempotency_key": bool, "latency_ms": n}
//	POST /_sandbox/faults    {"endpoint": "POST /v1/products", "status": 500|429, "count": n,
//	                          "retry_after_seconds": n, "after_effect": bool}
//	POST /_sandbox/seed      {"api_key": "...", "count": n} creates n products for that key
//	POST /_sandbox/reset     forgets products, idempotency keys, counters and faults
//
// The same controls exist as Go methods. The sandbox never logs headers or bodies: only the
// endpoint, the status and the duration.
package marketplace
