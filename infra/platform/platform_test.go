package platform_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/platform"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
)

const apiKey = "sk_test_CANARY_9f8e7d6c5b4a"

type bundle struct {
	sb     *marketplace.Sandbox
	srv    *httptest.Server
	client *platform.Client
	logs   *syncBuffer
	creds  port.Credentials
	seen   *recorder
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// recorder keeps what each request carried, to check where the key travels.
type recorder struct {
	mu       sync.Mutex
	requests []recorded
}

type recorded struct {
	auth, idem, url, body string
	other                 http.Header
}

func (rc *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		other := r.Header.Clone()
		other.Del("Authorization")
		rc.mu.Lock()
		rc.requests = append(rc.requests, recorded{
			auth: r.Header.Get("Authorization"), idem: r.Header.Get("Idempotency-Key"),
			url: r.URL.String(), body: string(body), other: other,
		})
		rc.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func setup(t *testing.T, mut ...func(*platform.Config)) *bundle {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sb, err := marketplace.New(marketplace.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	srv := httptest.NewServer(rec.wrap(sb))
	t.Cleanup(srv.Close)
	cfg := platform.Config{BaseURL: srv.URL, Logger: logger, Timeout: 2 * time.Second}
	for _, m := range mut {
		m(&cfg)
	}
	c, err := platform.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := port.NewCredentials(apiKey)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{sb: sb, srv: srv, client: c, logs: logs, creds: creds, seen: rec}
}

func input(ref string) port.ProductInput {
	return port.ProductInput{ExternalRef: ref, Title: "Mug", Description: "A mug", Price: "12.50", Currency: "EUR", Images: []string{"https://img.example/1.png"}}
}

func TestVerifyStore(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.VerifyStore(ctx, b.creds, "sandbox", "shop-1")
	if err != nil || !res.Valid || res.ShopName != "Sandbox shop shop-1" {
		t.Fatalf("valid key: %+v %v", res, err)
	}
	invalid, _ := port.NewCredentials("sk_test_invalid_123")
	res, err = b.client.VerifyStore(ctx, invalid, "sandbox", "shop-1")
	if err != nil || res.Valid || res.Reason == "" {
		t.Fatalf("invalid key: %+v %v", res, err)
	}
	unknown, _ := port.NewCredentials("live_unknown")
	res, err = b.client.VerifyStore(ctx, unknown, "sandbox", "shop-1")
	if err != nil || res.Valid {
		t.Fatalf("unknown key (401) must be an invalid result: %+v %v", res, err)
	}
	if got := b.sb.Calls(marketplace.EndpointVerify); got != 3 {
		t.Fatalf("verify calls = %d", got)
	}
}

func TestCreateFindList(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	p, err := b.client.CreateProduct(ctx, b.creds, "pub-1", input("pub-1"))
	if err != nil {
		t.Fatal(err)
	}
	if p.ID == "" || p.ExternalRef != "pub-1" || p.Price != "12.50" || len(p.Images) != 1 {
		t.Fatalf("created %+v", p)
	}
	found, err := b.client.FindProductByExternalRef(ctx, b.creds, "pub-1")
	if err != nil || found == nil || found.ID != p.ID {
		t.Fatalf("find: %+v %v", found, err)
	}
	none, err := b.client.FindProductByExternalRef(ctx, b.creds, "absent")
	if err != nil || none != nil {
		t.Fatalf("find absent: %+v %v", none, err)
	}
	// other shops (keys) do not see the product
	other, _ := port.NewCredentials("sk_test_other_shop")
	if f, err := b.client.FindProductByExternalRef(ctx, other, "pub-1"); err != nil || f != nil {
		t.Fatalf("other shop sees the product: %+v %v", f, err)
	}

	b.sb.Seed(apiKey, 6)
	var all []port.PlatformProduct
	token, pages := "", 0
	for {
		page, err := b.client.ListProducts(ctx, b.creds, 3, token)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, page.Items...)
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	if len(all) != 7 || pages != 3 || all[0].ID != p.ID {
		t.Fatalf("listed %d products in %d pages", len(all), pages)
	}
	if _, err := b.client.ListProducts(ctx, b.creds, 3, "garbage!"); !errors.Is(err, port.ErrPlatformRejected) {
		t.Fatalf("bad page token: %v", err)
	}
	page, err := b.client.ListProducts(ctx, b.creds, 0, "")
	if err != nil || len(page.Items) != 7 || page.NextPageToken != "" {
		t.Fatalf("default limit: %d %q %v", len(page.Items), page.NextPageToken, err)
	}
}

func TestIdempotencyKeyHonored(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	first, err := b.client.CreateProduct(ctx, b.creds, "pub-7", input("pub-7"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.client.CreateProduct(ctx, b.creds, "pub-7", input("pub-7"))
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != second.ID || b.sb.ProductsWithRef("pub-7") != 1 {
		t.Fatalf("honored key created twice: %s %s, %d", first.ID, second.ID, b.sb.ProductsWithRef("pub-7"))
	}
	st := b.sb.Stats()
	if st.IdempotentReplays != 1 || st.Calls[marketplace.EndpointCreateProduct] != 2 {
		t.Fatalf("stats %+v", st)
	}
	// same key, other body → rejected (409)
	other := input("pub-7")
	other.Title = "Other"
	if _, err := b.client.CreateProduct(ctx, b.creds, "pub-7", other); !errors.Is(err, port.ErrPlatformRejected) {
		t.Fatalf("reused key: %v", err)
	}
}

func TestIdempotencyKeyIgnored(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	// switch through the admin endpoint, as acceptance tests do
	resp, err := http.Post(b.srv.URL+"/_sandbox/settings", "application/json", strings.NewReader(`{"ignore_idempotency_key": true}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("settings: %v %v", resp, err)
	}
	resp.Body.Close()
	first, _ := b.client.CreateProduct(ctx, b.creds, "pub-8", input("pub-8"))
	second, _ := b.client.CreateProduct(ctx, b.creds, "pub-8", input("pub-8"))
	if first.ID == second.ID || b.sb.ProductsWithRef("pub-8") != 2 {
		t.Fatalf("ignoring gateway must create twice: %s %s", first.ID, second.ID)
	}
	// find-before-create still returns the oldest
	f, err := b.client.FindProductByExternalRef(ctx, b.creds, "pub-8")
	if err != nil || f == nil || f.ID != first.ID {
		t.Fatalf("find oldest: %+v %v", f, err)
	}
	// the worker pattern: look up, create only when absent → no third product
	publish := func(ref string) string {
		if p, err := b.client.FindProductByExternalRef(ctx, b.creds, ref); err == nil && p != nil {
			return p.ID
		}
		p, err := b.client.CreateProduct(ctx, b.creds, ref, input(ref))
		if err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	a, c := publish("pub-9"), publish("pub-9")
	if a != c || b.sb.ProductsWithRef("pub-9") != 1 {
		t.Fatalf("lookup-first created twice")
	}
	stats, err := http.Get(b.srv.URL + "/_sandbox/stats")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(stats.Body)
	stats.Body.Close()
	if !strings.Contains(string(body), `"pub-8":2`) || !strings.Contains(string(body), `"ignore_idempotency_key":true`) {
		t.Fatalf("stats endpoint: %s", body)
	}
}

func TestErrorMapping(t *testing.T) {
	ctx := context.Background()
	t.Run("401 unauthorized", func(t *testing.T) {
		b := setup(t)
		bad, _ := port.NewCredentials("nope_key")
		_, err := b.client.CreateProduct(ctx, bad, "k", input("r"))
		if !errors.Is(err, port.ErrPlatformUnauthorized) || !port.IsPermanent(err) {
			t.Fatalf("err = %v", err)
		}
		revoked, _ := port.NewCredentials("sk_test_invalid_x")
		if _, err := b.client.ListProducts(ctx, revoked, 1, ""); !errors.Is(err, port.ErrPlatformUnauthorized) {
			t.Fatalf("revoked: %v", err)
		}
		if _, err := b.client.ListProducts(ctx, port.Credentials{}, 1, ""); !errors.Is(err, port.ErrPlatformUnauthorized) {
			t.Fatalf("zero creds: %v", err)
		}
	})
	t.Run("429 with Retry-After", func(t *testing.T) {
		b := setup(t)
		b.sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointCreateProduct, Status: 429, RetryAfter: 7 * time.Second})
		_, err := b.client.CreateProduct(ctx, b.creds, "k", input("r"))
		var rl *port.RateLimitedError
		if !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second || !errors.Is(err, port.ErrPlatformRateLimited) {
			t.Fatalf("err = %v", err)
		}
		var de *domain.Error
		if !errors.As(err, &de) || de.Kind != domain.KindRateLimited || de.RetryAfter != 7*time.Second {
			t.Fatalf("domain error = %+v", de)
		}
		if b.sb.ProductsWithRef("r") != 0 {
			t.Fatal("faulted call had an effect")
		}
		// the fault is used up
		if _, err := b.client.CreateProduct(ctx, b.creds, "k", input("r")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("503 with Retry-After", func(t *testing.T) {
		b := setup(t)
		b.sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointCreateProduct, Status: 503, RetryAfter: 20 * time.Second})
		_, err := b.client.CreateProduct(ctx, b.creds, "k", input("r"))
		var de *domain.Error
		if !errors.Is(err, port.ErrPlatformTransient) || !errors.As(err, &de) || de.RetryAfter != 20*time.Second || port.IsPermanent(err) {
			t.Fatalf("err = %v (%+v)", err, de)
		}
	})
	t.Run("5xx transient, also after the effect", func(t *testing.T) {
		b := setup(t)
		b.sb.InjectFault(sandbox.Fault{Status: 503, Count: 2})
		if _, err := b.client.ListProducts(ctx, b.creds, 1, ""); !errors.Is(err, port.ErrPlatformTransient) || port.IsPermanent(err) {
			t.Fatalf("err = %v", err)
		}
		if _, err := b.client.VerifyStore(ctx, b.creds, "sandbox", "s"); !errors.Is(err, port.ErrPlatformTransient) {
			t.Fatalf("verify err = %v", err)
		}
		b.sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointCreateProduct, Status: 500, AfterEffect: true})
		if _, err := b.client.CreateProduct(ctx, b.creds, "pub-x", input("pub-x")); !errors.Is(err, port.ErrPlatformTransient) {
			t.Fatalf("after-effect err = %v", err)
		}
		// outcome unknown → look up: the product exists, and retrying with the key replays it
		f, err := b.client.FindProductByExternalRef(ctx, b.creds, "pub-x")
		if err != nil || f == nil {
			t.Fatalf("after-effect product missing: %v", err)
		}
		again, err := b.client.CreateProduct(ctx, b.creds, "pub-x", input("pub-x"))
		if err != nil || again.ID != f.ID || b.sb.ProductsWithRef("pub-x") != 1 {
			t.Fatalf("retry with key: %+v %v", again, err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		b := setup(t, func(c *platform.Config) { c.Timeout = 100 * time.Millisecond })
		b.sb.SetLatency(2 * time.Second)
		start := time.Now()
		_, err := b.client.FindProductByExternalRef(ctx, b.creds, "r")
		if !errors.Is(err, port.ErrPlatformTransient) || time.Since(start) > time.Second {
			t.Fatalf("err = %v after %s", err, time.Since(start))
		}
		b.sb.SetLatency(0)
	})
	t.Run("400 rejected with a bounded snippet", func(t *testing.T) {
		b := setup(t)
		in := input("r")
		in.Price = "twelve"
		_, err := b.client.CreateProduct(ctx, b.creds, "k", in)
		if !errors.Is(err, port.ErrPlatformRejected) || !strings.Contains(err.Error(), "price must be a decimal string") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		c, _ := platform.New(platform.Config{BaseURL: url})
		creds, _ := port.NewCredentials(apiKey)
		if _, err := c.VerifyStore(ctx, creds, "p", "s"); !errors.Is(err, port.ErrPlatformTransient) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestAPIKeyNeverLeaks drives every call and every error path, then looks for the key in the
// error strings, the adapter's and the sandbox's logs, and everywhere in the requests but the
// Authorization header.
func TestAPIKeyNeverLeaks(t *testing.T) {
	b := setup(t, func(c *platform.Config) { c.Timeout = 300 * time.Millisecond })
	ctx := context.Background()
	var errs []error
	collect := func(_ any, err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	run := func() {
		collect(b.client.VerifyStore(ctx, b.creds, "sandbox", "shop"))
		collect(b.client.CreateProduct(ctx, b.creds, "k1", input("ref-1")))
		collect(b.client.FindProductByExternalRef(ctx, b.creds, "ref-1"))
		collect(b.client.ListProducts(ctx, b.creds, 2, ""))
	}
	run()
	for _, status := range []int{500, 429, 503} {
		b.sb.InjectFault(sandbox.Fault{Status: status, Count: 4})
		run()
	}
	b.sb.SetLatency(time.Second)
	run()
	b.sb.SetLatency(0)
	bad := input("ref-2")
	bad.Currency = "euro"
	collect(b.client.CreateProduct(ctx, b.creds, "k2", bad))

	// a hostile gateway that echoes the Authorization header in its error bodies
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"error":{"code":"bad","message":"you sent `+r.Header.Get("Authorization")+`"}}`)
	}))
	defer echo.Close()
	hostile, _ := platform.New(platform.Config{BaseURL: echo.URL, Logger: slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	collect(hostile.ListProducts(ctx, b.creds, 1, ""))
	echoRaw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(502)
		_, _ = io.WriteString(w, "upstream said: "+r.Header.Get("Authorization")[7:20])
	}))
	defer echoRaw.Close()
	hostile2, _ := platform.New(platform.Config{BaseURL: echoRaw.URL})
	collect(hostile2.ListProducts(ctx, b.creds, 1, ""))

	if len(errs) < 16 {
		t.Fatalf("expected many errors, got %d", len(errs))
	}
	for _, err := range errs {
		if strings.Contains(err.Error(), apiKey) || strings.Contains(err.Error(), "CANARY") {
			t.Errorf("error leaks the key: %v", err)
		}
	}
	if logs := b.logs.String(); strings.Contains(logs, apiKey) || strings.Contains(logs, "CANARY") || !strings.Contains(logs, "platform call") {
		t.Errorf("logs leak the key or are missing:\n%s", logs)
	}
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	for _, r := range b.seen.requests {
		if r.auth != "Bearer "+apiKey {
			t.Errorf("request %s without the bearer key", r.url)
		}
		if strings.Contains(r.url, "CANARY") || strings.Contains(r.body, "CANARY") {
			t.Errorf("key outside the Authorization header: %s %s", r.url, r.body)
		}
		for k, v := range r.other {
			if strings.Contains(strings.Join(v, ","), "CANARY") {
				t.Errorf("key in header %s", k)
			}
		}
	}
}

func TestIdempotencyKeyHeaderSent(t *testing.T) {
	b := setup(t)
	if _, err := b.client.CreateProduct(context.Background(), b.creds, "0b6f6c9e-pub", input("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.CreateProduct(context.Background(), b.creds, "", input("x")); !errors.Is(err, port.ErrPlatformRejected) {
		t.Fatalf("empty key: %v", err)
	}
	b.seen.mu.Lock()
	defer b.seen.mu.Unlock()
	if len(b.seen.requests) != 1 || b.seen.requests[0].idem != "0b6f6c9e-pub" {
		t.Fatalf("requests %+v", b.seen.requests)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "not a url", "http://user:pw@host"} {
		if _, err := platform.New(platform.Config{BaseURL: u}); err == nil {
			t.Errorf("%q: want error", u)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("error quotes the password: %v", err)
		}
	}
}

// TestUpdateProduct: PUT /v1/products/{id} replaces the content; the same Idempotency-Key
// and request are answered from the saved response without applying anything (unless the
// sandbox ignores keys); the same key with another body, or an unknown product, is rejected.
func TestUpdateProduct(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	created, err := b.client.CreateProduct(ctx, b.creds, "pub-u", input("pub-u"))
	if err != nil {
		t.Fatal(err)
	}
	v2, v3 := input("pub-u"), input("pub-u")
	v2.Title, v3.Title = "Mug v2", "Mug v3"
	title := func() string {
		p, ok := b.sb.Product(apiKey, created.ID)
		if !ok {
			t.Fatal("product gone")
		}
		return p.Title
	}
	got, err := b.client.UpdateProduct(ctx, b.creds, "upd-1", created.ID, v2)
	if err != nil || got.ID != created.ID || got.Title != "Mug v2" || title() != "Mug v2" {
		t.Fatalf("update: %+v %v, platform %q", got, err, title())
	}
	if _, err := b.client.UpdateProduct(ctx, b.creds, "upd-1", created.ID, v2); err != nil {
		t.Fatal(err)
	}
	if st := b.sb.Stats(); st.ProductsUpdated != 1 || st.IdempotentReplays != 1 || st.Calls[marketplace.EndpointUpdateProduct] != 2 {
		t.Fatalf("replay applied again: %+v", st)
	}
	if _, err := b.client.UpdateProduct(ctx, b.creds, "upd-1", created.ID, v3); !errors.Is(err, port.ErrPlatformRejected) {
		t.Fatalf("reused key: %v", err)
	}
	if _, err := b.client.UpdateProduct(ctx, b.creds, "upd-2", created.ID, v3); err != nil || title() != "Mug v3" {
		t.Fatalf("second update: %v, platform %q", err, title())
	}
	// A late replay of the first update answers its saved response and changes nothing.
	if got, err := b.client.UpdateProduct(ctx, b.creds, "upd-1", created.ID, v2); err != nil || got.Title != "Mug v2" || title() != "Mug v3" {
		t.Fatalf("late replay: %+v %v, platform %q", got, err, title())
	}
	if _, err := b.client.UpdateProduct(ctx, b.creds, "upd-3", "prod_missing", v3); !errors.Is(err, port.ErrPlatformRejected) {
		t.Fatalf("unknown product: %v", err)
	}
	// A gateway that ignores the key applies a replay.
	b.sb.SetIgnoreIdempotencyKey(true)
	if _, err := b.client.UpdateProduct(ctx, b.creds, "upd-1", created.ID, v2); err != nil || title() != "Mug v2" {
		t.Fatalf("ignored key: %v, platform %q", err, title())
	}
	b.sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointUpdateProduct, Status: 503, RetryAfter: 7 * time.Second})
	_, err = b.client.UpdateProduct(ctx, b.creds, "upd-4", created.ID, v3)
	var de *domain.Error
	if !errors.As(err, &de) || de.RetryAfter != 7*time.Second || !errors.Is(err, port.ErrPlatformTransient) {
		t.Fatalf("503: %v", err)
	}
}

// TestDeleteProduct: DELETE /v1/products/{id} deletes the product; a repeat (its 404) is done,
// also when the first DELETE was applied but answered 500; another refusal stays an error.
func TestDeleteProduct(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	created, err := b.client.CreateProduct(ctx, b.creds, "pub-d", input("pub-d"))
	if err != nil {
		t.Fatal(err)
	}
	b.sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointDeleteProduct, Status: 500, AfterEffect: true})
	if err := b.client.DeleteProduct(ctx, b.creds, created.ID); !errors.Is(err, port.ErrPlatformTransient) {
		t.Fatalf("applied, answered 500: %v", err)
	}
	if _, ok := b.sb.Product(apiKey, created.ID); ok {
		t.Fatal("the product survived its delete")
	}
	if err := b.client.DeleteProduct(ctx, b.creds, created.ID); err != nil {
		t.Fatalf("repeat delete (404): %v", err)
	}
	if st := b.sb.Stats(); st.ProductsDeleted != 1 || st.Calls[marketplace.EndpointDeleteProduct] != 2 {
		t.Fatalf("stats: %+v", st)
	}
	revoked, err := port.NewCredentials("sk_test_invalid_d")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.client.DeleteProduct(ctx, revoked, created.ID); !errors.Is(err, port.ErrPlatformUnauthorized) {
		t.Fatalf("revoked key: %v", err)
	}
	if err := b.client.DeleteProduct(ctx, b.creds, ""); !errors.Is(err, port.ErrPlatformRejected) {
		t.Fatalf("empty id: %v", err)
	}
}
