package marketplace_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
)

func do(t *testing.T, method, url, key, body string, hdr ...string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, resp.Header, m
}

const product = `{"external_ref":"r1","title":"T","description":"","price":"1.00","currency":"EUR","images":[]}`

func TestSandboxOverHTTP(t *testing.T) {
	var logs bytes.Buffer
	sb, err := marketplace.New(marketplace.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sandbox.Start("", sb)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	u := srv.URL
	key := "sk_test_SANDBOXCANARY"

	if st, _, _ := do(t, "POST", u+"/v1/products", "", product); st != 401 {
		t.Fatalf("no key: %d", st)
	}
	if st, _, _ := do(t, "GET", u+"/v1/nothing", key, ""); st != 404 {
		t.Fatalf("unknown path: %d", st)
	}
	st, _, body := do(t, "POST", u+"/v1/products", key, product, "Idempotency-Key", "k1")
	if st != 201 || body["id"] == "" || body["external_ref"] != "r1" {
		t.Fatalf("create: %d %v", st, body)
	}
	// same key, same meaning (other key order) → replay
	reordered := `{"title":"T","external_ref":"r1","price":"1.00","currency":"EUR","description":"","images":[]}`
	st, h, again := do(t, "POST", u+"/v1/products", key, reordered, "Idempotency-Key", "k1")
	if st != 201 || again["id"] != body["id"] || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v", st, again)
	}

	// faults through the admin endpoint
	if st, _, _ := do(t, "POST", u+"/_sandbox/faults", "", `{"endpoint":"GET /v1/products","status":429,"count":2,"retry_after_seconds":4}`); st != 204 {
		t.Fatalf("faults: %d", st)
	}
	for i := 0; i < 2; i++ {
		if st, h, _ := do(t, "GET", u+"/v1/products?limit=1", key, ""); st != 429 || h.Get("Retry-After") != "4" {
			t.Fatalf("fault %d: %d %q", i, st, h.Get("Retry-After"))
		}
	}
	if st, _, _ := do(t, "GET", u+"/v1/products?limit=1", key, ""); st != 200 {
		t.Fatalf("after faults: %d", st)
	}
	// the find endpoint is a different endpoint name
	do(t, "POST", u+"/_sandbox/faults", "", `{"endpoint":"GET /v1/products?external_ref","status":500}`)
	if st, _, _ := do(t, "GET", u+"/v1/products?limit=1", key, ""); st != 200 {
		t.Fatalf("list hit the find fault: %d", st)
	}
	if st, _, _ := do(t, "GET", u+"/v1/products?external_ref=r1", key, ""); st != 500 {
		t.Fatalf("find fault: %d", st)
	}

	if st, _, seeded := do(t, "POST", u+"/_sandbox/seed", "", `{"api_key":"`+key+`","count":3}`); st != 200 || len(seeded["ids"].([]any)) != 3 {
		t.Fatalf("seed: %d %v", st, seeded)
	}
	st, _, stats := do(t, "GET", u+"/_sandbox/stats", "", "")
	calls := stats["calls"].(map[string]any)
	if st != 200 || calls[marketplace.EndpointCreateProduct] != float64(3) || calls[marketplace.EndpointListProducts] != float64(4) ||
		stats["products_created"] != float64(4) || stats["idempotent_replays"] != float64(1) {
		t.Fatalf("stats: %v", stats)
	}
	if st, _, _ := do(t, "POST", u+"/_sandbox/reset", "", ""); st != 204 {
		t.Fatalf("reset: %d", st)
	}
	if s := sb.Stats(); s.ProductsCreated != 0 || len(s.Calls) != 0 {
		t.Fatalf("after reset: %+v", s)
	}
	if strings.Contains(logs.String(), "SANDBOXCANARY") || !strings.Contains(logs.String(), "marketplace sandbox call") {
		t.Fatalf("sandbox logs leak the key or are missing:\n%s", logs.String())
	}
}

// TestSandboxRateLimitPerKey: with Rate 10/20 a key's 21st call at once is answered 429
// rate_limited with Retry-After and counted; another key is not held back; a tenth of a
// second later the key has a call again.
func TestSandboxRateLimitPerKey(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	sb, err := marketplace.New(marketplace.Config{Rate: domain.RateLimit{PerSecond: 10, Burst: 20}, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sandbox.Start("", sb)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	list := srv.URL + "/v1/products?limit=1"
	for i := range 20 {
		if st, _, body := do(t, "GET", list, "sk_test_shop_a", ""); st != 200 {
			t.Fatalf("call %d of the burst: %d %v", i, st, body)
		}
	}
	st, hdr, body := do(t, "GET", list, "sk_test_shop_a", "")
	if st != 429 || hdr.Get("Retry-After") != "1" || body["error"].(map[string]any)["code"] != "rate_limited" {
		t.Fatalf("over the limit: %d %v %v", st, hdr, body)
	}
	if st, _, _ := do(t, "GET", list, "sk_test_shop_b", ""); st != 200 {
		t.Fatalf("another key: %d", st)
	}
	mu.Lock()
	now = now.Add(100 * time.Millisecond)
	mu.Unlock()
	if st, _, _ := do(t, "GET", list, "sk_test_shop_a", ""); st != 200 {
		t.Fatalf("a token later: %d", st)
	}
	if got := sb.Stats().RateLimited; got != 1 {
		t.Fatalf("rate limited: %d", got)
	}
}
