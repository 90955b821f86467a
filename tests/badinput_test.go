package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/internal/servicetest"
)

// badTables are the tables a write endpoint of the flows may touch. A refused request must
// leave every one of them as it was.
var badTables = []string{
	"products", "stores", "store_verifications", "media", "media_processings", "material_transfers",
	"publications", "listing_updates", "product_syncs", "platform_products", "ai_tasks", "ai_usage_ledger",
	"operations", "outbox_events", "idempotency_requests",
	"users", "workspaces", "workspace_memberships", "refresh_token_families", "refresh_tokens", "integrations",
}

// badCounts counts the rows of every badTables table as the owner (RLS does not apply).
func badCounts(t *testing.T, env *servicetest.Env) map[string]int {
	t.Helper()
	out := make(map[string]int, len(badTables))
	for _, tbl := range badTables {
		out[tbl] = env.Count(`SELECT count(*) FROM ` + tbl)
	}
	return out
}

// badCase is one refused request and the problem it must produce.
type badCase struct {
	name   string
	req    servicetest.Request
	status int
	code   string
}

// badExpect sends c.req with a fresh Idempotency-Key (unless the case sets one), checks the
// problem+json answer and that no row was written anywhere.
func badExpect(t *testing.T, env *servicetest.Env, c badCase) {
	t.Helper()
	before := badCounts(t, env)
	if c.req.Header == nil {
		c.req.Header = map[string]string{}
	}
	if _, ok := c.req.Header["Idempotency-Key"]; !ok {
		c.req.Header["Idempotency-Key"] = uuid.NewString()
	}
	resp := env.Do(c.req)
	badProblem(t, resp, c.status, c.code)
	require.Equal(t, before, badCounts(t, env), "%s: a refused request wrote rows", c.name)
}

// badProblem checks that resp is the documented RFC 9457 problem: status, code, media type,
// the status repeated in the body, and no internals (SQL, stack trace) in it.
func badProblem(t *testing.T, resp servicetest.Response, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), "body: %s", resp.Body)
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &p), "body: %s", resp.Body)
	require.Equal(t, code, p.Code, "body: %s", resp.Body)
	require.Equal(t, status, p.Status, "body: %s", resp.Body)
	require.NotEmpty(t, p.Type)
	require.NotEmpty(t, p.Title)
	for _, internal := range []string{"SQLSTATE", "goroutine ", "pgx", "SELECT ", "INSERT ", "panic"} {
		require.NotContains(t, string(resp.Body), internal)
	}
}

// badSetup is an account with a product, a verified store and a pending one, on the API
// alone (no workers, so nothing changes behind the test's back).
type badSetup struct {
	env       *servicetest.Env
	acct      servicetest.Account
	ws        string
	productID string
	storeID   string // verified (set up as the owner)
}

func badStart(t *testing.T, opts ...servicetest.Option) badSetup {
	t.Helper()
	env := servicetest.Start(t, opts...)
	acct := env.Register("bad-" + uuid.NewString()[:8] + "@example.com")
	s := badSetup{env: env, acct: acct, ws: "/v1/workspaces/" + acct.WorkspaceID}

	product := env.Do(servicetest.Request{Method: "POST", Path: s.ws + "/products", Token: acct.AccessToken,
		Body: map[string]any{"title": "Mug", "price": "9.90", "currency": "EUR"}})
	require.Equal(t, http.StatusCreated, product.Status, "%s", product.Body)
	s.productID = product.JSON(t)["product"].(map[string]any)["id"].(string)

	store := env.Do(servicetest.Request{Method: "POST", Path: s.ws + "/stores", Token: acct.AccessToken,
		Header: map[string]string{"Idempotency-Key": uuid.NewString()},
		Body:   map[string]any{"platform": "sandbox", "shop_id": "shop-1", "name": "Shop", "credentials": map[string]string{"api_key": "sk_test_bad"}}})
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	s.storeID = store.JSON(t)["store"].(map[string]any)["id"].(string)
	// No workers run here: the verification the store started stays pending, so the test
	// marks the store verified itself, as the owner.
	_, err := env.DB.Owner.Exec(context.Background(),
		`UPDATE stores SET status = 'verified', verified_at = now() WHERE id = $1`, s.storeID)
	require.NoError(t, err)
	return s
}

func (s badSetup) req(method, path string, body any) servicetest.Request {
	return servicetest.Request{Method: method, Path: s.ws + path, Token: s.acct.AccessToken, Body: body}
}

// TestBadInputStores: unknown store, unsupported platform, missing or malformed
// credentials and a duplicate store are refused with their codes and write nothing.
func TestBadInputStores(t *testing.T) {
	t.Parallel()
	s := badStart(t)
	randomStore := "/stores/" + uuid.NewString()
	store := func(platform, shop string, creds any) map[string]any {
		m := map[string]any{"platform": platform, "shop_id": shop, "name": "Shop"}
		if creds != nil {
			m["credentials"] = creds
		}
		return m
	}
	cases := []badCase{
		{"publish to an unknown store", s.req("POST", "/products/"+s.productID+"/publications", map[string]any{"store_id": uuid.NewString()}), 404, "STORE_NOT_FOUND"},
		{"replace authorization of an unknown store", s.req("PUT", randomStore+"/authorization", map[string]any{"credentials": map[string]string{"api_key": "sk_test_x"}}), 404, "STORE_NOT_FOUND"},
		{"verify an unknown store", s.req("POST", randomStore+"/verifications", map[string]any{}), 404, "STORE_NOT_FOUND"},
		{"sync an unknown store", s.req("POST", randomStore+"/product-syncs", map[string]any{}), 404, "STORE_NOT_FOUND"},
		{"store id that is not a uuid", s.req("POST", "/stores/nope/verifications", map[string]any{}), 404, "STORE_NOT_FOUND"},
		{"unsupported platform", s.req("POST", "/stores", store("ebay", "shop-2", map[string]string{"api_key": "sk_test_x"})), 400, "PLATFORM_UNSUPPORTED"},
		{"missing credentials", s.req("POST", "/stores", store("sandbox", "shop-2", nil)), 400, "CREDENTIALS_INVALID"},
		{"null credentials", s.req("POST", "/stores", store("sandbox", "shop-2", json.RawMessage("null"))), 400, "CREDENTIALS_INVALID"},
		{"empty credentials", s.req("POST", "/stores", store("sandbox", "shop-2", map[string]any{})), 400, "CREDENTIALS_INVALID"},
		{"empty api_key", s.req("POST", "/stores", store("sandbox", "shop-2", map[string]any{"api_key": ""})), 400, "CREDENTIALS_INVALID"},
		{"api_key not a string", s.req("POST", "/stores", store("sandbox", "shop-2", map[string]any{"api_key": 42})), 400, "CREDENTIALS_INVALID"},
		{"api_key with a space", s.req("POST", "/stores", store("sandbox", "shop-2", map[string]any{"api_key": "sk_test a"})), 400, "CREDENTIALS_INVALID"},
		{"credentials with an unknown field", s.req("POST", "/stores", store("sandbox", "shop-2", map[string]any{"api_key": "sk_test_x", "secret": "y"})), 400, "CREDENTIALS_INVALID"},
		{"credentials not an object", s.req("POST", "/stores", store("sandbox", "shop-2", "sk_test_x")), 400, "CREDENTIALS_INVALID"},
		{"replace with missing credentials", s.req("PUT", "/stores/"+s.storeID+"/authorization", map[string]any{}), 400, "CREDENTIALS_INVALID"},
		{"replace with empty api_key", s.req("PUT", "/stores/"+s.storeID+"/authorization", map[string]any{"credentials": map[string]any{"api_key": ""}}), 400, "CREDENTIALS_INVALID"},
		{"duplicate store", s.req("POST", "/stores", store("sandbox", "shop-1", map[string]string{"api_key": "sk_test_other"})), 409, "STORE_ALREADY_EXISTS"},
		{"duplicate store, shop id with spaces", s.req("POST", "/stores", store("sandbox", " shop-1 ", map[string]string{"api_key": "sk_test_other"})), 409, "STORE_ALREADY_EXISTS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { badExpect(t, s.env, c) })
	}
	// A credential value the client sent is never echoed in the refusal.
	resp := s.env.Do(servicetest.Request{Method: "POST", Path: s.ws + "/stores", Token: s.acct.AccessToken,
		Header: map[string]string{"Idempotency-Key": uuid.NewString()},
		Body:   store("sandbox", "shop-3", map[string]any{"api_key": "sk_test_ECHO secret", "ECHO_FIELD": 1})})
	badProblem(t, resp, 400, "CREDENTIALS_INVALID")
	require.NotContains(t, string(resp.Body), "ECHO")
}

// TestBadInputMaterialTransfers: source URLs that are not absolute http(s) URLs, and URLs
// whose host is an address that is not globally reachable (IPv4-translated forms included) or
// a localhost name, are refused before anything is written.
func TestBadInputMaterialTransfers(t *testing.T) {
	t.Parallel()
	s := badStart(t, func(c *config.Config) { c.FetchAllowPrivate = false })
	var cases []badCase
	for _, u := range []string{"ftp://x", "not a url", "", "/relative/path", "http://", "file:///etc/passwd",
		"javascript:alert(1)", "http://user:pass@example.com/a.png"} {
		cases = append(cases, badCase{"invalid " + u, s.req("POST", "/material-transfers", map[string]any{"source_url": u}), 400, "SOURCE_URL_INVALID"})
	}
	for _, u := range []string{"http://127.0.0.1/x", "http://169.254.169.254/", "http://[::1]/", "http://10.0.0.1/a.png",
		"http://192.168.1.1/", "http://0.0.0.0/", "http://[::ffff:127.0.0.1]/", "http://localhost:8080/", "https://127.0.0.1:443/x",
		"http://[::ffff:0:127.0.0.1]:41099/x", "http://[::ffff:0:a9fe:a9fe]/", "http://[::ffff:0:a00:1]/", "http://app.localhost/"} {
		cases = append(cases, badCase{"forbidden " + u, s.req("POST", "/material-transfers", map[string]any{"source_url": u}), 400, "SOURCE_URL_FORBIDDEN"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { badExpect(t, s.env, c) })
	}
}

// TestBadInputMedia: an oversized media, an unsupported type, and "complete" before the
// bytes were uploaded (or of an unknown media) are refused.
func TestBadInputMedia(t *testing.T) {
	t.Parallel()
	s := badStart(t)
	limit := s.env.Config.MediaMaxBytes
	media := func(ct string, size int64) map[string]any {
		return map[string]any{"filename": "a.png", "content_type": ct, "size": size}
	}
	cases := []badCase{
		{"larger than MEDIA_MAX_BYTES", s.req("POST", "/media", media("image/png", limit+1)), 413, "MEDIA_TOO_LARGE"},
		{"unsupported content type", s.req("POST", "/media", media("application/pdf", 10)), 400, "MEDIA_TYPE_UNSUPPORTED"},
		{"svg is not accepted", s.req("POST", "/media", media("image/svg+xml", 10)), 400, "MEDIA_TYPE_UNSUPPORTED"},
		{"zero size", s.req("POST", "/media", media("image/png", 0)), 400, "VALIDATION_FAILED"},
		{"no filename", s.req("POST", "/media", map[string]any{"content_type": "image/png", "size": 10}), 400, "VALIDATION_FAILED"},
		{"complete an unknown media", s.req("POST", "/media/"+uuid.NewString()+"/complete", map[string]any{}), 404, "MEDIA_NOT_FOUND"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { badExpect(t, s.env, c) })
	}
	// A request body that is not JSON at all: 415, before anything else.
	wrongType := s.req("POST", "/media", `filename=a.png`)
	wrongType.Header = map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	badExpect(t, s.env, badCase{"form body", wrongType, 415, "UNSUPPORTED_MEDIA_TYPE"})

	created := s.env.Do(s.req("POST", "/media", media("image/png", 100)))
	require.Equal(t, http.StatusCreated, created.Status, "%s", created.Body)
	id := created.JSON(t)["media"].(map[string]any)["id"].(string)
	badExpect(t, s.env, badCase{"complete before upload", s.req("POST", "/media/"+id+"/complete", map[string]any{}), 409, "MEDIA_NOT_UPLOADED"})
}

// TestBadInputPublishingAndAI: the product draft's If-Match (missing 428, stale 412), a
// second publication of a product to the same store, a second active sync, bad AI task
// kinds and bad ids.
func TestBadInputPublishingAndAI(t *testing.T) {
	t.Parallel()
	s := badStart(t)
	draft := "/products/" + s.productID + "/draft"
	draftBody := map[string]any{"title": "Mug XL", "price": "12.50", "currency": "EUR"}
	withIfMatch := func(v string) servicetest.Request {
		r := s.req("PUT", draft, draftBody)
		r.Header = map[string]string{"If-Match": v}
		return r
	}
	// The first publication and sync are accepted (rows written); the second of each is not.
	pub := s.env.Do(servicetest.Request{Method: "POST", Path: s.ws + "/products/" + s.productID + "/publications", Token: s.acct.AccessToken,
		Header: map[string]string{"Idempotency-Key": uuid.NewString()}, Body: map[string]any{"store_id": s.storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	pubID := pub.JSON(t)["publication"].(map[string]any)["id"].(string)
	sync := s.env.Do(servicetest.Request{Method: "POST", Path: s.ws + "/stores/" + s.storeID + "/product-syncs", Token: s.acct.AccessToken,
		Header: map[string]string{"Idempotency-Key": uuid.NewString()}, Body: map[string]any{}})
	require.Equal(t, http.StatusAccepted, sync.Status, "%s", sync.Body)

	ai := func(kind, product string) map[string]any {
		return map[string]any{"kind": kind, "product_id": product, "input": map[string]string{"prompt": "describe it"}}
	}
	cases := []badCase{
		{"draft without If-Match", s.req("PUT", draft, draftBody), 428, "PRECONDITION_REQUIRED"},
		{"draft with a stale If-Match", withIfMatch(`"7"`), 412, "REVISION_MISMATCH"},
		{"draft with If-Match \"+1\"", withIfMatch(`"+1"`), 400, "VALIDATION_FAILED"},
		{"draft with If-Match \"01\"", withIfMatch(`"01"`), 400, "VALIDATION_FAILED"},
		{"draft with If-Match \"001\"", withIfMatch(`"001"`), 400, "VALIDATION_FAILED"},
		{"draft with If-Match \"-1\"", withIfMatch(`"-1"`), 400, "VALIDATION_FAILED"},
		{"draft with If-Match \"0\"", withIfMatch(`"0"`), 400, "VALIDATION_FAILED"},
		{"draft with a weak If-Match", withIfMatch(`W/"1"`), 400, "VALIDATION_FAILED"},
		{"draft with If-Match \" 1\"", withIfMatch(`" 1"`), 400, "VALIDATION_FAILED"},
		{"draft with an If-Match over int range", withIfMatch(`"99999999999999999999"`), 400, "VALIDATION_FAILED"},
		{"second publication for the same product and store", s.req("POST", "/products/"+s.productID+"/publications", map[string]any{"store_id": s.storeID}), 409, "PRODUCT_ALREADY_PUBLISHED"},
		{"publication of an unknown product", s.req("POST", "/products/"+uuid.NewString()+"/publications", map[string]any{"store_id": s.storeID}), 404, "PRODUCT_NOT_FOUND"},
		{"publication with a store id that is not a uuid", s.req("POST", "/products/"+s.productID+"/publications", map[string]any{"store_id": "shop-1"}), 400, "VALIDATION_FAILED"},
		{"update of a publication not published yet", s.req("POST", "/publications/"+pubID+"/updates", map[string]any{}), 409, "PUBLICATION_NOT_PUBLISHED"},
		{"update of an unknown publication", s.req("POST", "/publications/"+uuid.NewString()+"/updates", map[string]any{}), 404, "PUBLICATION_NOT_FOUND"},
		{"update with a publication id that is not a uuid", s.req("POST", "/publications/pub-1/updates", map[string]any{}), 404, "PUBLICATION_NOT_FOUND"},
		{"update naming a revision", s.req("POST", "/publications/"+pubID+"/updates", map[string]any{"product_revision": 1}), 400, "UNKNOWN_FIELD"},
		{"second active sync", s.req("POST", "/stores/"+s.storeID+"/product-syncs", map[string]any{}), 409, "PRODUCT_SYNC_ALREADY_ACTIVE"},
		{"AI task with an unknown kind", s.req("POST", "/ai-tasks", ai("poem", s.productID)), 400, "VALIDATION_FAILED"},
		{"AI task with an empty kind", s.req("POST", "/ai-tasks", ai("", s.productID)), 400, "VALIDATION_FAILED"},
		{"AI task with an upper-case kind", s.req("POST", "/ai-tasks", ai("TEXT", s.productID)), 400, "VALIDATION_FAILED"},
		{"AI task with a kind of the wrong type", s.req("POST", "/ai-tasks", map[string]any{"kind": 1, "product_id": s.productID}), 400, "VALIDATION_FAILED"},
		{"AI task for an unknown product", s.req("POST", "/ai-tasks", ai("text", uuid.NewString())), 404, "PRODUCT_NOT_FOUND"},
		{"AI task with a product id that is not a uuid", s.req("POST", "/ai-tasks", ai("text", "mug")), 400, "VALIDATION_FAILED"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { badExpect(t, s.env, c) })
	}
	// The draft was never changed by the refused saves.
	require.Equal(t, 1, s.env.Count(`SELECT revision FROM products WHERE id = $1`, s.productID))
}

// TestBadInputMalformedBodies: every flow write endpoint refuses malformed JSON, a non-object,
// trailing data, unknown fields and an oversized body, and writes nothing.
func TestBadInputMalformedBodies(t *testing.T) {
	t.Parallel()
	s := badStart(t)
	created := s.env.Do(s.req("POST", "/media", map[string]any{"filename": "a.png", "content_type": "image/png", "size": 100}))
	require.Equal(t, http.StatusCreated, created.Status, "%s", created.Body)
	mediaID := created.JSON(t)["media"].(map[string]any)["id"].(string)

	endpoints := []struct{ method, path, valid string }{
		{"POST", "/stores", `{"platform":"sandbox","shop_id":"shop-9","name":"S","credentials":{"api_key":"sk_test_x"}}`},
		{"PUT", "/stores/" + s.storeID + "/authorization", `{"credentials":{"api_key":"sk_test_y"}}`},
		{"POST", "/stores/" + s.storeID + "/verifications", `{}`},
		{"POST", "/stores/" + s.storeID + "/product-syncs", `{}`},
		{"POST", "/media", `{"filename":"a.png","content_type":"image/png","size":10}`},
		{"POST", "/media/" + mediaID + "/complete", `{}`},
		{"POST", "/material-transfers", `{"source_url":"https://example.com/a.png"}`},
		{"POST", "/products/" + s.productID + "/publications", `{"store_id":"` + s.storeID + `"}`},
		{"POST", "/publications/" + uuid.NewString() + "/updates", `{}`},
		{"POST", "/ai-tasks", `{"kind":"text","product_id":"` + s.productID + `","input":{"prompt":"p"}}`},
		{"POST", "/products", `{"title":"T","price":"1.00","currency":"EUR"}`},
	}
	for _, e := range endpoints {
		inner := strings.TrimSuffix(e.valid, "}")
		sep := ","
		if inner == "{" {
			sep = ""
		}
		bodies := []badCase{
			{"truncated", servicetest.Request{Body: e.valid[:len(e.valid)-1]}, 400, "MALFORMED_JSON"},
			{"not JSON", servicetest.Request{Body: "store please"}, 400, "MALFORMED_JSON"},
			{"an array", servicetest.Request{Body: "[]"}, 400, "MALFORMED_JSON"},
			{"trailing data", servicetest.Request{Body: e.valid + ` {}`}, 400, "MALFORMED_JSON"},
			{"unknown field", servicetest.Request{Body: inner + sep + `"bogus":1}`}, 400, "UNKNOWN_FIELD"},
			{"larger than MAX_BODY_BYTES", servicetest.Request{Body: inner + sep + `"pad":"` + strings.Repeat("x", int(s.env.Config.MaxBodyBytes)) + `"}`}, 413, "BODY_TOO_LARGE"},
		}
		if name, value, ok := firstMember(e.valid); ok {
			// A name given twice, or beside a case variant of itself, means two things.
			bodies = append(bodies,
				badCase{"name given twice", servicetest.Request{Body: inner + `,"` + name + `":` + value + `}`}, 400, "UNKNOWN_FIELD"},
				badCase{"name beside a case variant", servicetest.Request{Body: inner + `,"` + strings.ToUpper(name[:1]) + name[1:] + `":` + value + `}`}, 400, "UNKNOWN_FIELD"},
				badCase{"name in another case", servicetest.Request{Body: `{"` + strings.ToUpper(name) + `"` + strings.TrimPrefix(e.valid, `{"`+name+`"`)}, 400, "UNKNOWN_FIELD"},
			)
		}
		for _, b := range bodies {
			c := b
			c.name = e.method + " " + e.path + ": " + b.name
			c.req = s.req(e.method, e.path, b.req.Body)
			t.Run(c.name, func(t *testing.T) { badExpect(t, s.env, c) })
		}
	}
}

// firstMember returns the name and the raw value of the first member of the JSON object
// body, whose members are strings or flat objects; ok is false for {}.
func firstMember(body string) (name, value string, ok bool) {
	m := regexp.MustCompile(`^\{"([a-z_]+)":("[^"]*"|\{[^}]*\})`).FindStringSubmatch(body)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// textField is one text field of a write endpoint: a valid body, where the field sits in it,
// the longest value the API accepts, and the code a refused value gets.
type textField struct {
	endpoint string // "METHOD path", path relative to the workspace unless it starts with /v1/auth
	body     map[string]any
	field    []string // path of the field in body, e.g. {"input", "prompt"}
	long     string   // a value one character over the field's limit (or plainly too long)
	code     string   // the code of a refused value
	status   int      // 400 unless set
	// multiline fields accept line feeds, carriage returns and tabs (other control
	// characters are refused everywhere).
	multiline bool
}

// setField returns a deep copy of body with the value at path replaced by v.
func setField(body map[string]any, path []string, v any) map[string]any {
	out := make(map[string]any, len(body))
	for k, val := range body {
		out[k] = val
	}
	if len(path) == 1 {
		out[path[0]] = v
		return out
	}
	switch inner := body[path[0]].(type) {
	case map[string]any:
		out[path[0]] = setField(inner, path[1:], v)
	case []any:
		out[path[0]] = []any{v}
	}
	return out
}

// getField returns the string at path in body.
func getField(body map[string]any, path []string) string {
	switch v := body[path[0]].(type) {
	case map[string]any:
		return getField(v, path[1:])
	case []any:
		return v[0].(string)
	default:
		return v.(string)
	}
}

// invalidUTF8Marker is replaced by bytes that are not UTF-8 after the body is marshaled.
const invalidUTF8Marker = "INVALID-UTF8-MARKER"

// TestBadInputTextFields: every text field of every write endpoint, sent with a NUL, a
// control character, bytes that are not UTF-8 or a value over its limit, is refused with
// problem+json and a stable code (never a 500), and nothing is written.
func TestBadInputTextFields(t *testing.T) {
	t.Parallel()
	s := badStart(t)
	product := map[string]any{"title": "Mug", "description": "A mug", "price": "9.90", "currency": "EUR",
		"images": []any{"https://img.example.com/a.png"}}
	store := map[string]any{"platform": "sandbox", "shop_id": "shop-9", "name": "Shop", "credentials": map[string]any{"api_key": "sk_test_x"}}
	media := map[string]any{"filename": "a.png", "content_type": "image/png", "size": 10}
	ai := map[string]any{"kind": "text", "product_id": s.productID, "input": map[string]any{"prompt": "describe it"}}
	register := map[string]any{"email": "new@example.com", "password": "correct horse battery", "workspace_name": "Acme"}
	login := map[string]any{"email": s.acct.Email, "password": s.acct.Password}
	long := func(n int) string { return strings.Repeat("a", n) }
	fields := []textField{
		{"POST /products", product, []string{"title"}, long(501), "VALIDATION_FAILED", 0, false},
		{"POST /products", product, []string{"description"}, long(20001), "VALIDATION_FAILED", 0, true},
		{"POST /products", product, []string{"price"}, "1" + long(20), "VALIDATION_FAILED", 0, false},
		{"POST /products", product, []string{"currency"}, "EURO", "VALIDATION_FAILED", 0, false},
		{"POST /products", product, []string{"images", "0"}, "https://img.example.com/" + long(2048), "VALIDATION_FAILED", 0, false},
		{"PUT /products/" + s.productID + "/draft", product, []string{"title"}, long(501), "VALIDATION_FAILED", 0, false},
		{"PUT /products/" + s.productID + "/draft", product, []string{"description"}, long(20001), "VALIDATION_FAILED", 0, true},
		{"PUT /products/" + s.productID + "/draft", product, []string{"images", "0"}, "https://img.example.com/" + long(2048), "VALIDATION_FAILED", 0, false},
		{"POST /stores", store, []string{"platform"}, long(201), "PLATFORM_UNSUPPORTED", 0, false},
		{"POST /stores", store, []string{"shop_id"}, long(201), "VALIDATION_FAILED", 0, false},
		{"POST /stores", store, []string{"name"}, long(201), "VALIDATION_FAILED", 0, false},
		{"POST /stores", store, []string{"credentials", "api_key"}, long(4097), "CREDENTIALS_INVALID", 0, false},
		{"PUT /stores/" + s.storeID + "/authorization", map[string]any{"credentials": map[string]any{"api_key": "sk_test_y"}},
			[]string{"credentials", "api_key"}, long(4097), "CREDENTIALS_INVALID", 0, false},
		{"POST /media", media, []string{"filename"}, long(256), "VALIDATION_FAILED", 0, false},
		{"POST /media", media, []string{"content_type"}, "image/" + long(200), "MEDIA_TYPE_UNSUPPORTED", 0, false},
		{"POST /material-transfers", map[string]any{"source_url": "http://93.184.216.34/a.png"}, []string{"source_url"},
			"http://93.184.216.34/" + long(2048-len("http://93.184.216.34/")+1), "SOURCE_URL_INVALID", 0, false},
		{"POST /products/" + s.productID + "/publications", map[string]any{"store_id": s.storeID}, []string{"store_id"}, long(37), "VALIDATION_FAILED", 0, false},
		{"POST /ai-tasks", ai, []string{"kind"}, long(10), "VALIDATION_FAILED", 0, false},
		{"POST /ai-tasks", ai, []string{"product_id"}, long(37), "VALIDATION_FAILED", 0, false},
		{"POST /ai-tasks", ai, []string{"input", "prompt"}, long(4001), "VALIDATION_FAILED", 0, true},
		{"POST /v1/auth/register", register, []string{"email"}, long(250) + "@example.com", "VALIDATION_FAILED", 0, false},
		{"POST /v1/auth/register", register, []string{"password"}, long(257), "VALIDATION_FAILED", 0, false},
		{"POST /v1/auth/register", register, []string{"workspace_name"}, long(201), "VALIDATION_FAILED", 0, false},
		{"POST /v1/auth/login", login, []string{"email"}, long(250) + "@example.com", "INVALID_CREDENTIALS", 401, false},
		{"POST /v1/auth/login", login, []string{"password"}, long(257), "INVALID_CREDENTIALS", 401, false},
		{"POST /v1/auth/refresh", map[string]any{"refresh_token": s.acct.RefreshToken}, []string{"refresh_token"}, long(129), "REFRESH_TOKEN_INVALID", 401, false},
	}
	for _, f := range fields {
		method, path, _ := strings.Cut(f.endpoint, " ")
		status := f.status
		if status == 0 {
			status = http.StatusBadRequest
		}
		// Each bad value is the valid one with something inserted after its first character.
		valid := getField(f.body, f.field)
		with := func(bad string) string { return valid[:1] + bad + valid[1:] }
		values := []struct{ name, value, code string }{
			{"NUL", with("\x00"), f.code},
			{"control character", with("\x1b[2J"), f.code},
			{"line feed", with("\n"), f.code},
			{"over its limit", f.long, f.code},
			{"not UTF-8", with(invalidUTF8Marker), "MALFORMED_JSON"},
		}
		if f.multiline {
			values = append(values[:2], values[3:]...)
		}
		for _, v := range values {
			name := f.endpoint + " " + strings.Join(f.field, ".") + ": " + v.name
			raw, err := json.Marshal(setField(f.body, f.field, v.value))
			require.NoError(t, err)
			raw = []byte(strings.ReplaceAll(string(raw), invalidUTF8Marker, "\xff\xfe"))
			req := s.req(method, path, raw)
			if strings.HasPrefix(path, "/v1/auth/") {
				req = servicetest.Request{Method: method, Path: path, Body: raw}
			}
			if strings.HasSuffix(path, "/draft") {
				req.Header = map[string]string{"If-Match": `"1"`}
			}
			wantStatus := status
			if v.code == "MALFORMED_JSON" {
				wantStatus = http.StatusBadRequest
			}
			t.Run(name, func(t *testing.T) { badExpect(t, s.env, badCase{name, req, wantStatus, v.code}) })
		}
	}
	// The draft was never changed by the refused saves.
	require.Equal(t, 1, s.env.Count(`SELECT revision FROM products WHERE id = $1`, s.productID))
}

// TestBadInputUploadSingleUse: an upload URL is spent by its first complete upload. Another
// PUT, before or after complete, gets 409 UPLOAD_ALREADY_COMPLETED and the stored original
// keeps the first upload's bytes.
func TestBadInputUploadSingleUse(t *testing.T) {
	t.Parallel()
	s := badStart(t)
	first := []byte("\x89PNG\r\n\x1a\nfirst upload")
	created := s.env.Do(s.req("POST", "/media", map[string]any{"filename": "a.png", "content_type": "image/png", "size": len(first)}))
	require.Equal(t, http.StatusCreated, created.Status, "%s", created.Body)
	m := created.JSON(t)
	id := m["media"].(map[string]any)["id"].(string)
	upload := m["upload"].(map[string]any)
	url := strings.TrimPrefix(upload["url"].(string), s.env.Config.PublicBaseURL)
	put := func(body []byte) servicetest.Response {
		return s.env.Do(servicetest.Request{Method: "PUT", Path: url, Body: body, Header: map[string]string{"Content-Type": "image/png"}})
	}
	original := filepath.Join(s.env.Config.StorageDir, "objects", "workspaces", s.acct.WorkspaceID, "media", id, "original")

	resp := put(first)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	other := []byte("\x89PNG\r\n\x1a\nother bytes!")
	badProblem(t, put(other), http.StatusConflict, "UPLOAD_ALREADY_COMPLETED")

	done := s.env.Do(servicetest.Request{Method: "POST", Path: s.ws + "/media/" + id + "/complete", Token: s.acct.AccessToken,
		Header: map[string]string{"Idempotency-Key": uuid.NewString()}, Body: map[string]any{}})
	require.Equal(t, http.StatusAccepted, done.Status, "%s", done.Body)
	badProblem(t, put(other), http.StatusConflict, "UPLOAD_ALREADY_COMPLETED")

	got, err := os.ReadFile(original)
	require.NoError(t, err)
	require.Equal(t, first, got, "the stored original changed")
}
