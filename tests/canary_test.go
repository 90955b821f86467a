package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/cloudevent"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/eventstream"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/servicetest"
)

// canaryStream is the Redis stream of integration events (app/worker.StreamEvents), under
// STREAM_PREFIX, which servicetest.StartAll sets to the test's BullMQ prefix.
const canaryStream = "events"

// canaryRun drives the service and keeps every response it got, so the test can check that
// no response carried the canary either.
type canaryRun struct {
	t         *testing.T
	env       *servicetest.Env
	acct      servicetest.Account
	ws        string
	responses []servicetest.Response
}

// do sends a request; idempotent adds a fresh Idempotency-Key (or the given one).
func (c *canaryRun) do(method, path string, body any, key string) servicetest.Response {
	c.t.Helper()
	req := servicetest.Request{Method: method, Path: c.ws + path, Token: c.acct.AccessToken, Body: body}
	if key != "" {
		req.Header = map[string]string{"Idempotency-Key": key}
	}
	resp := c.env.Do(req)
	c.responses = append(c.responses, resp)
	return resp
}

// start sends an idempotent request that must be accepted and returns its operation id.
func (c *canaryRun) start(method, path string, body any, status int) (servicetest.Response, string) {
	c.t.Helper()
	resp := c.do(method, path, body, uuid.NewString())
	require.Equal(c.t, status, resp.Status, "%s %s: %s", method, path, resp.Body)
	return resp, resp.JSON(c.t)["operation"].(map[string]any)["id"].(string)
}

func (c *canaryRun) wait(opID, want string) map[string]any {
	c.t.Helper()
	op := c.env.WaitOperation(c.acct, opID)
	if want != "" {
		require.Equal(c.t, want, op["status"], "%v", op)
	}
	return op
}

func canaryID(t *testing.T, resp servicetest.Response, name string) string {
	t.Helper()
	return resp.JSON(t)[name].(map[string]any)["id"].(string)
}

// canaryPNG is a small valid PNG.
func canaryPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 16, 12))
	for x := range 16 {
		for y := range 12 {
			img.Set(x, y, color.RGBA{R: uint8(x * 16), G: uint8(y * 20), B: 200, A: 255})
		}
	}
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	return buf.Bytes()
}

// canaryQuerier is what the database search needs: the owner pool, or a transaction.
type canaryQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// canaryFindDB searches every column of every table of the public schema for needle: bytea
// columns byte for byte, every other column as its text form (jsonb, arrays, text…). It
// returns the columns holding it ("table.column") and every column it searched.
func canaryFindDB(t *testing.T, q canaryQuerier, needle string) (hits, searched []string) {
	t.Helper()
	ctx := context.Background()
	rows, err := q.Query(ctx, `SELECT c.table_name, c.column_name, c.data_type
		FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
		  AND NOT EXISTS (SELECT 1 FROM pg_class p WHERE p.relnamespace = 'public'::regnamespace
		                  AND p.relname = c.table_name AND p.relispartition) -- searched through their parent
		ORDER BY c.table_name, c.ordinal_position`)
	require.NoError(t, err)
	type column struct{ table, name, typ string }
	var cols []column
	for rows.Next() {
		var c column
		require.NoError(t, rows.Scan(&c.table, &c.name, &c.typ))
		cols = append(cols, c)
	}
	require.NoError(t, rows.Err())
	for _, c := range cols {
		tbl, col := pgx.Identifier{c.table}.Sanitize(), pgx.Identifier{c.name}.Sanitize()
		var sql string
		var arg any = needle
		if c.typ == "bytea" {
			sql = fmt.Sprintf(`SELECT count(*) FROM %s WHERE position($1::bytea IN %s) > 0`, tbl, col)
			arg = []byte(needle)
		} else {
			sql = fmt.Sprintf(`SELECT count(*) FROM %s WHERE strpos(%s::text, $1) > 0`, tbl, col)
		}
		var n int
		require.NoError(t, q.QueryRow(ctx, sql, arg).Scan(&n), "%s.%s", c.table, c.name)
		if n > 0 {
			hits = append(hits, c.table+"."+c.name)
		}
		searched = append(searched, c.table+"."+c.name)
	}
	return hits, searched
}

// canaryDumpRedis reads every key of prefix (its name and whole content: strings, hashes,
// lists, sets, sorted sets, streams) and the integration event stream from streamFrom on, as
// text per key.
func canaryDumpRedis(t *testing.T, rdb *redis.Client, prefix, streamFrom string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	var keys []string
	var cursor uint64
	for {
		batch, next, err := rdb.Scan(ctx, cursor, prefix+"*", 1000).Result()
		require.NoError(t, err)
		keys = append(keys, batch...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	for _, k := range keys {
		out[k] = canaryReadKey(t, rdb, k, "-")
	}
	return out
}

func canaryReadKey(t *testing.T, rdb *redis.Client, key, streamFrom string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	b.WriteString(key + "\n")
	typ, err := rdb.Type(ctx, key).Result()
	require.NoError(t, err)
	add := func(vs ...string) {
		for _, v := range vs {
			b.WriteString(v + "\n")
		}
	}
	// A key may disappear between SCAN and the read (a job removed on completion): redis.Nil
	// and empty answers are fine.
	ok := func(err error) { require.True(t, err == nil || errors.Is(err, redis.Nil), "%s: %v", key, err) }
	switch typ {
	case "string":
		v, err := rdb.Get(ctx, key).Result()
		ok(err)
		add(v)
	case "hash":
		m, err := rdb.HGetAll(ctx, key).Result()
		ok(err)
		for f, v := range m {
			add(f, v)
		}
	case "list":
		vs, err := rdb.LRange(ctx, key, 0, -1).Result()
		ok(err)
		add(vs...)
	case "set":
		vs, err := rdb.SMembers(ctx, key).Result()
		ok(err)
		add(vs...)
	case "zset":
		vs, err := rdb.ZRange(ctx, key, 0, -1).Result()
		ok(err)
		add(vs...)
	case "stream":
		msgs, err := rdb.XRange(ctx, key, streamFrom, "+").Result()
		ok(err)
		for _, m := range msgs {
			add(m.ID)
			for f, v := range m.Values {
				add(f, fmt.Sprint(v))
			}
		}
	case "none":
	default:
		require.Failf(t, "unexpected Redis type", "%s is a %s: the search cannot read it", key, typ)
	}
	return b.String()
}

// canaryFindFiles returns the files under dir whose bytes hold needle.
func canaryFindFiles(t *testing.T, dir, needle string) (hits []string, files int) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(raw, []byte(needle)) {
			hits = append(hits, path)
		}
		return nil
	}))
	return hits, files
}

func canaryHits(dump map[string]string, needle string) []string {
	var hits []string
	for k, v := range dump {
		if strings.Contains(v, needle) {
			hits = append(hits, k)
		}
	}
	sort.Strings(hits)
	return hits
}

// canaryLogHits returns the log lines holding needle.
func canaryLogHits(logs, needle string) []string {
	var hits []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, needle) {
			hits = append(hits, line)
		}
	}
	return hits
}

func canaryResponseHits(responses []servicetest.Response, needle string) []string {
	var hits []string
	for _, r := range responses {
		if strings.Contains(string(r.Body), needle) || strings.Contains(fmt.Sprint(r.Header), needle) {
			hits = append(hits, fmt.Sprintf("%d %s", r.Status, r.Body))
		}
	}
	return hits
}

// TestCanarySecretsNeverLeak plants credential values sharing one random canary as store
// api keys (created, replaced, verified again, invalid, unknown to the platform, malformed),
// runs every flow end to end — successes and failures — and then searches everything the
// service wrote or said: every column of every table (the sealed credentials included: they
// are ciphertext), every Redis key of the test's BullMQ prefix and the integration event
// stream, the object storage directory, the service's logs and every HTTP response. The
// canary must appear nowhere. A sub-test plants it on purpose and proves the search finds it.
func TestCanarySecretsNeverLeak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	raw := make([]byte, 10)
	_, _ = rand.Read(raw)
	canary := "CANARY" + hex.EncodeToString(raw)
	keyOne := "sk_test_" + canary + "_one"
	keyTwo := "sk_test_" + canary + "_two"
	keyInvalid := "sk_test_invalid_" + canary
	keyUnknown := "live_" + canary // not a key the marketplace knows: 401 everywhere

	streamFrom := fmt.Sprintf("%d-0", time.Now().Add(-2*time.Second).UnixMilli())
	env := servicetest.StartAll(t, func(c *config.Config) { c.FetchAllowPrivate = true })
	c := &canaryRun{t: t, env: env, acct: env.Register("canary@example.com")}
	c.ws = "/v1/workspaces/" + c.acct.WorkspaceID
	img := canaryPNG(t)

	// The material source: this test's own server (private address, allowed by the option).
	source := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/material.png" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(img)
	}))
	t.Cleanup(source.Close)

	// Store A: created with one canary key, replaced with another, verified again.
	storeKey := uuid.NewString()
	storeBody := map[string]any{"platform": "sandbox", "shop_id": "shop-a", "name": "Shop A", "credentials": map[string]string{"api_key": keyOne}}
	created := c.do("POST", "/stores", storeBody, storeKey)
	require.Equal(t, http.StatusCreated, created.Status, "%s", created.Body)
	storeA := canaryID(t, created, "store")
	c.wait(created.JSON(t)["operation"].(map[string]any)["id"].(string), "succeeded")
	_, op := c.start("PUT", "/stores/"+storeA+"/authorization", map[string]any{"credentials": map[string]string{"api_key": keyTwo}}, http.StatusAccepted)
	c.wait(op, "succeeded")
	_, op = c.start("POST", "/stores/"+storeA+"/verifications", map[string]any{}, http.StatusAccepted)
	verifyOp := c.wait(op, "succeeded")
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM stores WHERE id = $1 AND status = 'verified' AND credentials_version = 2`, storeA))
	env.Work.Externals.MarketplaceSandbox.Seed(keyTwo, 3) // products the sync will find

	// The replay and the reuse of the store's key carry the canary in the request.
	replay := c.do("POST", "/stores", storeBody, storeKey)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	reused := c.do("POST", "/stores", map[string]any{"platform": "sandbox", "shop_id": "shop-a", "name": "Shop A",
		"credentials": map[string]string{"api_key": keyTwo}}, storeKey)
	require.Equal(t, "IDEMPOTENCY_KEY_REUSED", reused.Code())

	product := c.do("POST", "/products", map[string]any{"title": "Mug", "description": "A white mug", "price": "9.90", "currency": "EUR"}, uuid.NewString())
	require.Equal(t, http.StatusCreated, product.Status, "%s", product.Body)
	productID := canaryID(t, product, "product")

	// Every flow, started together, then awaited.
	var ops []string
	published, op := c.start("POST", "/products/"+productID+"/publications", map[string]any{"store_id": storeA}, http.StatusAccepted)
	ops = append(ops, op)
	_, op = c.start("POST", "/stores/"+storeA+"/product-syncs", map[string]any{}, http.StatusAccepted)
	ops = append(ops, op)
	for _, kind := range []string{"text", "category", "image"} {
		_, op = c.start("POST", "/ai-tasks", map[string]any{"kind": kind, "product_id": productID, "input": map[string]string{"prompt": "describe the mug"}}, http.StatusAccepted)
		ops = append(ops, op)
	}
	media := c.do("POST", "/media", map[string]any{"filename": "mug.png", "content_type": "image/png", "size": len(img)}, "")
	require.Equal(t, http.StatusCreated, media.Status, "%s", media.Body)
	mediaID := canaryID(t, media, "media")
	upload := media.JSON(t)["upload"].(map[string]any)
	put, err := http.NewRequest(upload["method"].(string), upload["url"].(string), bytes.NewReader(img))
	require.NoError(t, err)
	for k, v := range upload["headers"].(map[string]any) {
		put.Header.Set(k, v.(string))
	}
	if put.Header.Get("Content-Type") == "" {
		put.Header.Set("Content-Type", "image/png")
	}
	putResp, err := http.DefaultClient.Do(put)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, putResp.Body)
	_ = putResp.Body.Close()
	require.Equal(t, http.StatusOK, putResp.StatusCode)
	_, op = c.start("POST", "/media/"+mediaID+"/complete", map[string]any{}, http.StatusAccepted)
	ops = append(ops, op)
	_, op = c.start("POST", "/material-transfers", map[string]any{"source_url": source.URL + "/material.png"}, http.StatusAccepted)
	ops = append(ops, op)
	t.Logf("%s flows started", time.Now().Format(time.StampMilli))
	for _, id := range ops {
		c.wait(id, "succeeded")
	}
	// The publication, once made, is unpublished (its DELETE carries the canary key too).
	_, op = c.start("POST", "/publications/"+canaryID(t, published, "publication")+"/unpublish", map[string]any{}, http.StatusAccepted)
	c.wait(op, "succeeded")
	t.Logf("%s flows succeeded", time.Now().Format(time.StampMilli))

	// Failing paths. Store B's key verifies as invalid; publishing or syncing to it is refused.
	createdB, op := c.start("POST", "/stores", map[string]any{"platform": "sandbox", "shop_id": "shop-b", "name": "Shop B",
		"credentials": map[string]string{"api_key": keyInvalid}}, http.StatusCreated)
	storeB := canaryID(t, createdB, "store")
	c.wait(op, "")
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM stores WHERE id = $1 AND status = 'invalid'`, storeB))
	refused := c.do("POST", "/products/"+productID+"/publications", map[string]any{"store_id": storeB}, uuid.NewString())
	require.Equal(t, "STORE_NOT_VERIFIED", refused.Code(), "%s", refused.Body)
	refused = c.do("POST", "/stores/"+storeB+"/product-syncs", map[string]any{}, uuid.NewString())
	require.Equal(t, "STORE_NOT_VERIFIED", refused.Code(), "%s", refused.Body)
	// Store C's key is unknown to the platform (401 on the verify call): the store is invalid.
	createdC, op := c.start("POST", "/stores", map[string]any{"platform": "sandbox", "shop_id": "shop-c", "name": "Shop C",
		"credentials": map[string]string{"api_key": keyUnknown}}, http.StatusCreated)
	c.wait(op, "")
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM stores WHERE id = $1 AND status = 'invalid'`, canaryID(t, createdC, "store")))
	// Malformed credentials holding the canary are refused without an echo.
	for _, creds := range []map[string]any{
		{"api_key": keyOne + " with a space"},
		{"api_key": keyOne, canary: keyOne},
		{"api_key": keyOne + "\n"},
	} {
		resp := c.do("POST", "/stores", map[string]any{"platform": "sandbox", "shop_id": "shop-d", "name": "Shop D", "credentials": creds}, uuid.NewString())
		require.Equal(t, "CREDENTIALS_INVALID", resp.Code(), "%s", resp.Body)
		resp = c.do("PUT", "/stores/"+storeA+"/authorization", map[string]any{"credentials": creds}, uuid.NewString())
		require.Equal(t, "CREDENTIALS_INVALID", resp.Code(), "%s", resp.Body)
	}
	// A platform and an AI provider that keep failing: the publication and the AI task fail
	// after the last attempt, with the canary key sent on every platform call.
	attempts := env.Config.JobAttempts
	env.Work.Externals.MarketplaceSandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointCreateProduct, Status: 500, Count: attempts})
	env.Work.Externals.AISandbox.InjectFault(sandbox.Fault{Endpoint: aiprovider.EndpointChat, Status: 500, Count: attempts})
	second := c.do("POST", "/products", map[string]any{"title": "Cup", "price": "4.50", "currency": "EUR"}, "")
	require.Equal(t, http.StatusCreated, second.Status, "%s", second.Body)
	var failing []string
	_, op = c.start("POST", "/products/"+canaryID(t, second, "product")+"/publications", map[string]any{"store_id": storeA}, http.StatusAccepted)
	failing = append(failing, op)
	_, op = c.start("POST", "/ai-tasks", map[string]any{"kind": "text", "product_id": productID, "input": map[string]string{"prompt": "again"}}, http.StatusAccepted)
	failing = append(failing, op)
	_, op = c.start("POST", "/material-transfers", map[string]any{"source_url": source.URL + "/missing.png"}, http.StatusAccepted)
	failing = append(failing, op)
	t.Logf("%s failing paths started", time.Now().Format(time.StampMilli))
	for _, id := range failing {
		c.wait(id, "failed")
	}
	t.Logf("%s failing paths failed", time.Now().Format(time.StampMilli))
	// A store disconnected: its revoke carries a canary key; its credentials are then erased.
	createdD, op := c.start("POST", "/stores", map[string]any{"platform": "sandbox", "shop_id": "shop-d", "name": "Shop D",
		"credentials": map[string]string{"api_key": keyOne}}, http.StatusCreated)
	c.wait(op, "succeeded")
	_, op = c.start("DELETE", "/stores/"+canaryID(t, createdD, "store"), nil, http.StatusAccepted)
	c.wait(op, "succeeded")

	// Everything settles: no operation still running, every outbox event delivered.
	require.Eventually(t, func() bool {
		return env.Count(`SELECT count(*) FROM operations WHERE status IN ('pending', 'running')`) == 0 &&
			env.Count(`SELECT count(*) FROM outbox_all_events WHERE status <> 'dispatched'`) == 0
	}, 30*time.Second, 50*time.Millisecond, "operations or outbox events did not settle")
	t.Logf("%s settled", time.Now().Format(time.StampMilli))
	// Every resource read back (one and lists) is a response too.
	for _, list := range []string{"/stores", "/operations", "/publications", "/product-syncs", "/ai-tasks", "/media", "/material-transfers", "/products"} {
		require.Equal(t, http.StatusOK, c.do("GET", list, nil, "").Status)
	}
	for _, s := range []string{storeA, storeB} {
		require.Equal(t, http.StatusOK, c.do("GET", "/stores/"+s, nil, "").Status)
	}

	opts, err := redis.ParseURL(env.Config.RedisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := env.Config.BullMQPrefix

	// The search is not vacuous: the places searched hold this test's data.
	require.Positive(t, env.Count(`SELECT count(*) FROM idempotency_requests WHERE status = 'completed'`))
	require.Positive(t, env.Count(`SELECT count(*) FROM outbox_all_events`))
	require.GreaterOrEqual(t, env.Count(`SELECT count(*) FROM operations WHERE status = 'failed' AND error_code <> ''`), 3)
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM stores WHERE length(credentials_sealed) = 0`), "only the disconnected store's are erased")
	require.Equal(t, 4, env.Count(`SELECT count(*) FROM stores`))
	dump := canaryDumpRedis(t, rdb, prefix, streamFrom)
	require.Greater(t, len(dump), 10, "the BullMQ keys of this test")
	require.Contains(t, dump[prefix+":"+canaryStream], verifyOp["id"], "the event stream holds this test's operations")
	// Every integration event type is on the stream, as a CloudEvent of this workspace: the
	// search below covers each (the field-name check of infra/outbox covers their types).
	require.Equal(t, prefix+":"+canaryStream, eventstream.Stream(env.Config.StreamPrefix))
	entries, err := rdb.XRange(context.Background(), eventstream.Stream(env.Config.StreamPrefix), "-", "+").Result()
	require.NoError(t, err)
	types := map[string]bool{}
	for _, e := range entries {
		ev, err := cloudevent.FromEntry(e.Values)
		require.NoError(t, err)
		require.Equal(t, c.acct.WorkspaceID, ev.WorkspaceID)
		types[ev.Type] = true
	}
	for _, ie := range domain.IntegrationEvents() {
		require.True(t, types[ie.Sample.EventType()], "no %s event on the stream: the canary search would not cover it", ie.Sample.EventType())
	}
	logs := env.Logs()
	require.True(t, strings.Contains(logs, `"route":"/v1/workspaces/{workspace_id}/stores"`), "the logs hold this test's requests")
	require.True(t, strings.Contains(logs, c.acct.WorkspaceID) && strings.Contains(logs, `"queue":"store-verification"`), "the logs hold this test's jobs")

	dbHits, searched := canaryFindDB(t, env.DB.Owner, canary)
	require.Empty(t, dbHits, "the canary is in the database")
	for _, col := range []string{"stores.credentials_sealed", "idempotency_requests.response_body", "idempotency_requests.response_headers",
		"outbox_events.event_payload", "outbox_events.metadata", "outbox_dispatched.event_payload", "outbox_dispatched.metadata",
		"operations.result", "operations.error_code", "operations.error_message"} {
		require.Contains(t, searched, col)
	}
	require.Empty(t, canaryHits(dump, canary), "the canary is in Redis")
	fileHits, files := canaryFindFiles(t, env.Config.StorageDir, canary)
	require.Positive(t, files, "the storage holds the media")
	require.Empty(t, fileHits, "the canary is in object storage")
	require.Empty(t, canaryLogHits(logs, canary), "the canary is in the logs")
	require.Empty(t, canaryResponseHits(c.responses, canary), "the canary is in a response")

	t.Run("the search finds a planted canary", func(t *testing.T) {
		// Database: planted in a text, a jsonb and two bytea columns inside a transaction
		// that is rolled back.
		tx, err := env.DB.Owner.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		for _, sql := range []string{
			`UPDATE products SET description = 'planted ' || $1 WHERE id = (SELECT id FROM products LIMIT 1)`,
			`UPDATE outbox_dispatched SET metadata = metadata || jsonb_build_object('planted', $1::text) WHERE id = (SELECT id FROM outbox_dispatched LIMIT 1)`,
			`UPDATE idempotency_requests SET response_body = response_body || convert_to($1, 'UTF8') WHERE id = (SELECT id FROM idempotency_requests WHERE response_body IS NOT NULL LIMIT 1)`,
			`UPDATE stores SET credentials_sealed = convert_to('x' || $1 || 'y', 'UTF8') WHERE id = (SELECT id FROM stores LIMIT 1)`,
		} {
			tag, err := tx.Exec(ctx, sql, canary)
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected(), sql)
		}
		hits, _ := canaryFindDB(t, tx, canary)
		require.ElementsMatch(t, []string{"products.description", "outbox_dispatched.metadata",
			"idempotency_requests.response_body", "stores.credentials_sealed"}, hits)

		// Redis: in a key name and in each kind of value, under the test's prefix.
		planted := map[string]func(key string) error{
			prefix + ":planted:string": func(k string) error { return rdb.Set(ctx, k, "x"+canary, time.Minute).Err() },
			prefix + ":planted:hash":   func(k string) error { return rdb.HSet(ctx, k, "data", `{"api_key":"`+canary+`"}`).Err() },
			prefix + ":planted:list":   func(k string) error { return rdb.RPush(ctx, k, "a", canary).Err() },
			prefix + ":planted:set":    func(k string) error { return rdb.SAdd(ctx, k, canary).Err() },
			prefix + ":planted:zset":   func(k string) error { return rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: canary}).Err() },
			prefix + ":planted:stream": func(k string) error {
				return rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: map[string]any{"payload": canary}}).Err()
			},
			prefix + ":planted:" + canary: func(k string) error { return rdb.Set(ctx, k, "1", time.Minute).Err() },
		}
		var want []string
		for k, plant := range planted {
			require.NoError(t, plant(k))
			want = append(want, k)
		}
		t.Cleanup(func() {
			for k := range planted {
				_ = rdb.Del(context.Background(), k).Err()
			}
		})
		require.ElementsMatch(t, want, canaryHits(canaryDumpRedis(t, rdb, prefix, streamFrom), canary))

		// Object storage.
		scratch := filepath.Join(env.Config.StorageDir, "planted")
		require.NoError(t, os.WriteFile(scratch, []byte("x"+canary), 0o600))
		hitsFiles, _ := canaryFindFiles(t, env.Config.StorageDir, canary)
		require.Equal(t, []string{scratch}, hitsFiles)

		// Logs: the service logs a client's request id, so a request carrying the canary
		// there puts it in the logs the test searched.
		resp := env.Do(servicetest.Request{Method: "GET", Path: c.ws + "/stores", Token: c.acct.AccessToken,
			Header: map[string]string{"X-Request-Id": canary}})
		require.Equal(t, http.StatusOK, resp.Status)
		require.NotEmpty(t, canaryLogHits(env.Logs(), canary))
		require.NotEmpty(t, canaryResponseHits([]servicetest.Response{resp}, canary))
	})
}
