package tests

// Acceptance tests of docs/guarantees.md (1 to 5 and 9) and of the
// one-active-sync rule, driven over HTTP against real PostgreSQL, Redis and BullMQ. Each
// test states the guarantee it checks and fails when that guarantee breaks; counts are
// taken from the database (as the owner) and from the sandboxes, never from memory of the
// test.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/servicetest"
)

// seedKey is a fresh Idempotency-Key header.
func seedKey() map[string]string { return map[string]string{"Idempotency-Key": uuid.NewString()} }

// seedWS is the base path of acct's workspace.
func seedWS(acct servicetest.Account) string { return "/v1/workspaces/" + acct.WorkspaceID }

// seedField returns body[object][field] as a string.
func seedField(t testing.TB, r servicetest.Response, object, field string) string {
	t.Helper()
	obj, ok := r.JSON(t)[object].(map[string]any)
	require.True(t, ok, "no %q object in %s", object, r.Body)
	v, ok := obj[field].(string)
	require.True(t, ok, "no %s.%s in %s", object, field, r.Body)
	return v
}

// seedStoreBody is a store of the sandbox platform with a valid sandbox key.
func seedStoreBody(shop string) map[string]any {
	return map[string]any{"platform": "sandbox", "shop_id": shop, "name": "Shop " + shop,
		"credentials": map[string]string{"api_key": "sk_test_seed"}}
}

// seedVerifiedStore creates a store and waits until its verification succeeded (needs
// workers: StartAll, or children). It returns the store id.
func seedVerifiedStore(t testing.TB, env *servicetest.Env, acct servicetest.Account, shop string) string {
	t.Helper()
	resp := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/stores", Token: acct.AccessToken,
		Header: seedKey(), Body: seedStoreBody(shop)})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	op := env.WaitOperation(acct, seedField(t, resp, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	return seedField(t, resp, "store", "id")
}

// seedProduct creates a product (no key) and returns its id.
func seedProduct(t testing.TB, env *servicetest.Env, acct servicetest.Account) string {
	t.Helper()
	resp := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products", Token: acct.AccessToken,
		Body: map[string]any{"title": "Mug", "description": "A mug", "price": "9.90", "currency": "EUR"}})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	return seedField(t, resp, "product", "id")
}

// seedSend performs one request without touching testing.T (safe from any goroutine).
func seedSend(base, method, path, token string, header map[string]string, body []byte) (servicetest.Response, error) {
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		return servicetest.Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return servicetest.Response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return servicetest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}, err
}

// seedBurst sends n copies of one request at once: every goroutine is ready before a
// barrier releases them all. header(i) gives the headers of copy i.
func seedBurst(t testing.TB, base, method, path, token string, body []byte, n int, header func(i int) map[string]string) []servicetest.Response {
	t.Helper()
	out := make([]servicetest.Response, n)
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			out[i], errs[i] = seedSend(base, method, path, token, header(i), body)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return out
}

// seedReplay sends req again with the same key and requires the byte-identical status and
// body of first, marked Idempotent-Replayed: true.
func seedReplay(t testing.TB, env *servicetest.Env, req servicetest.Request, first servicetest.Response) {
	t.Helper()
	again := env.Do(req)
	require.Equal(t, first.Status, again.Status, "replay status: %s", again.Body)
	require.Equal(t, string(first.Body), string(again.Body), "replay body differs")
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.NotEmpty(t, again.Header.Get("Idempotency-Retention"))
}

// TestSeedReplayReturnsOriginalResponse — guarantee 1: replaying an Idempotency-Key gives the
// original response and creates no second resource, task, operation, event or external
// effect. Each first-adopter request (create store, publish, AI task) is replayed twice:
// while its work may still run and after it finished; both replays must be the original
// bytes (an operation shown "pending" stays "pending" in the replay). The database and the
// sandboxes are then counted.
func TestSeedReplayReturnsOriginalResponse(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t)
	acct := env.Register("seed-replay@example.com")
	ws := seedWS(acct)

	storeReq := servicetest.Request{Method: "POST", Path: ws + "/stores", Token: acct.AccessToken, Header: seedKey(), Body: seedStoreBody("replay")}
	store := env.Do(storeReq)
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	require.Empty(t, store.Header.Get("Idempotent-Replayed"))
	seedReplay(t, env, storeReq, store)
	require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, store, "operation", "id"))["status"])
	seedReplay(t, env, storeReq, store)
	storeID := seedField(t, store, "store", "id")

	productID := seedProduct(t, env, acct)
	pubReq := servicetest.Request{Method: "POST", Path: ws + "/products/" + productID + "/publications", Token: acct.AccessToken,
		Header: seedKey(), Body: map[string]any{"store_id": storeID}}
	pub := env.Do(pubReq)
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	seedReplay(t, env, pubReq, pub)
	require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, pub, "operation", "id"))["status"])
	seedReplay(t, env, pubReq, pub)
	pubID := seedField(t, pub, "publication", "id")

	aiReq := servicetest.Request{Method: "POST", Path: ws + "/ai-tasks", Token: acct.AccessToken, Header: seedKey(),
		Body: map[string]any{"kind": "text", "product_id": productID, "input": map[string]string{"prompt": "Describe the mug"}}}
	ai := env.Do(aiReq)
	require.Equal(t, http.StatusAccepted, ai.Status, "%s", ai.Body)
	seedReplay(t, env, aiReq, ai)
	require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, ai, "operation", "id"))["status"])
	seedReplay(t, env, aiReq, ai)
	aiID := seedField(t, ai, "ai_task", "id")

	// One of everything in the database.
	for table, n := range map[string]int{"stores": 1, "store_verifications": 1, "publications": 1, "ai_tasks": 1, "ai_usage_ledger": 1} {
		require.Equal(t, n, env.Count("SELECT count(*) FROM "+table+" WHERE workspace_id = $1", acct.WorkspaceID), table)
	}
	for _, id := range []string{storeID, pubID, aiID} {
		require.Equal(t, 1, env.Count("SELECT count(*) FROM operations WHERE resource_id = $1", id), "operations of %s", id)
	}
	for _, typ := range []string{"store.verification_requested", "publication.requested", "ai_task.requested"} {
		require.Equal(t, 1, env.Count("SELECT count(*) FROM outbox_all_events WHERE workspace_id = $1 AND event_type = $2", acct.WorkspaceID, typ), typ)
	}
	require.Equal(t, 3, env.Count("SELECT count(*) FROM idempotency_requests WHERE workspace_id = $1", acct.WorkspaceID))

	// One external effect each.
	mp, aip := env.Work.Externals.MarketplaceSandbox, env.Work.Externals.AISandbox
	require.Equal(t, 1, mp.Calls(marketplace.EndpointVerify))
	require.Equal(t, 1, mp.Calls(marketplace.EndpointCreateProduct))
	require.Equal(t, 1, mp.ProductsWithRef(pubID))
	require.Equal(t, 1, aip.Executions(aiprovider.EndpointChat))
}

// TestSeedKeyReuseWithOtherRequest — guarantee 2: the same key with another
// request is 409 IDEMPOTENCY_KEY_REUSED and writes nothing; the same request with its JSON
// keys reordered is the same request (a replay, not a conflict).
func TestSeedKeyReuseWithOtherRequest(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	acct := env.Register("seed-reuse@example.com")
	ws := seedWS(acct)
	count := func() map[string]int {
		out := map[string]int{}
		for _, table := range []string{"stores", "store_verifications", "operations", "outbox_events", "idempotency_requests", "ai_tasks"} {
			out[table] = env.Count("SELECT count(*) FROM "+table+" WHERE workspace_id = $1", acct.WorkspaceID)
		}
		return out
	}

	key := seedKey()
	first := env.Do(servicetest.Request{Method: "POST", Path: ws + "/stores", Token: acct.AccessToken, Header: key,
		Body: `{"platform":"sandbox","shop_id":"reuse","name":"Shop","credentials":{"api_key":"sk_test_seed"}}`})
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	before := count()
	require.Equal(t, 1, before["stores"])

	other := env.Do(servicetest.Request{Method: "POST", Path: ws + "/stores", Token: acct.AccessToken, Header: key,
		Body: `{"platform":"sandbox","shop_id":"reuse-2","name":"Shop","credentials":{"api_key":"sk_test_seed"}}`})
	require.Equal(t, http.StatusConflict, other.Status, "%s", other.Body)
	require.Equal(t, "IDEMPOTENCY_KEY_REUSED", other.Code())
	require.NotContains(t, string(other.Body), "sk_test_seed")
	require.Equal(t, before, count())

	reordered := env.Do(servicetest.Request{Method: "POST", Path: ws + "/stores", Token: acct.AccessToken, Header: key,
		Body: `{ "credentials": {"api_key": "sk_test_seed"}, "name": "Shop", "shop_id": "reuse", "platform": "sandbox" }`})
	require.Equal(t, first.Status, reordered.Status, "%s", reordered.Body)
	require.Equal(t, string(first.Body), string(reordered.Body))
	require.Equal(t, "true", reordered.Header.Get("Idempotent-Replayed"))
	require.Equal(t, before, count())

	// The same on a 202 endpoint: an AI task, then another kind under the same key.
	productID := seedProduct(t, env, acct)
	aiKey := seedKey()
	ai := env.Do(servicetest.Request{Method: "POST", Path: ws + "/ai-tasks", Token: acct.AccessToken, Header: aiKey,
		Body: map[string]any{"kind": "text", "product_id": productID, "input": map[string]string{"prompt": "a"}}})
	require.Equal(t, http.StatusAccepted, ai.Status, "%s", ai.Body)
	before = count()
	other = env.Do(servicetest.Request{Method: "POST", Path: ws + "/ai-tasks", Token: acct.AccessToken, Header: aiKey,
		Body: map[string]any{"kind": "category", "product_id": productID, "input": map[string]string{"prompt": "a"}}})
	require.Equal(t, http.StatusConflict, other.Status, "%s", other.Body)
	require.Equal(t, "IDEMPOTENCY_KEY_REUSED", other.Code())
	require.Equal(t, before, count())
	require.Equal(t, 1, before["ai_tasks"])
}

// TestSeedConcurrentIdenticalRequests — guarantee 3: 40 identical requests with
// one key, released together, enter business execution once: one store row, one operation,
// one outbox event; every other answer is the replay of that one, or 409
// IDEMPOTENCY_REQUEST_IN_PROGRESS with Retry-After. Nothing else is allowed (a second
// execution would show as a second row, or as another status such as a store conflict).
func TestSeedConcurrentIdenticalRequests(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	acct := env.Register("seed-concurrent@example.com")
	body, err := json.Marshal(seedStoreBody("concurrent"))
	require.NoError(t, err)
	key := uuid.NewString()
	const n = 40
	resps := seedBurst(t, env.URL, "POST", seedWS(acct)+"/stores", acct.AccessToken, body, n,
		func(int) map[string]string { return map[string]string{"Idempotency-Key": key} })

	var executed []servicetest.Response
	replayed, inProgress := 0, 0
	for _, r := range resps {
		switch {
		case r.Status == http.StatusCreated && r.Header.Get("Idempotent-Replayed") == "":
			executed = append(executed, r)
		case r.Status == http.StatusCreated && r.Header.Get("Idempotent-Replayed") == "true":
			replayed++
		case r.Status == http.StatusConflict && r.Code() == "IDEMPOTENCY_REQUEST_IN_PROGRESS":
			require.NotEmpty(t, r.Header.Get("Retry-After"), "IN_PROGRESS without Retry-After")
			inProgress++
		default:
			require.Failf(t, "unexpected answer", "%d %s", r.Status, r.Body)
		}
	}
	require.Len(t, executed, 1, "executions (replayed %d, in progress %d)", replayed, inProgress)
	for _, r := range resps {
		if r.Status == http.StatusCreated {
			require.Equal(t, string(executed[0].Body), string(r.Body))
		}
	}
	t.Logf("%d requests: 1 executed, %d replayed, %d in progress", n, replayed, inProgress)
	for table, want := range map[string]int{"stores": 1, "store_verifications": 1, "operations": 1, "idempotency_requests": 1} {
		require.Equal(t, want, env.Count("SELECT count(*) FROM "+table+" WHERE workspace_id = $1", acct.WorkspaceID), table)
	}
	// One execution writes one event of each type (the verification request, and the
	// operation's history event).
	require.Equal(t, 1, env.Count("SELECT count(*) FROM outbox_all_events WHERE workspace_id = $1 AND event_type = 'store.verification_requested'", acct.WorkspaceID))
	require.Zero(t, env.Count(`SELECT count(*) FROM (SELECT event_type FROM outbox_all_events WHERE workspace_id = $1
		GROUP BY event_type HAVING count(*) > 1) d`, acct.WorkspaceID), "an event type written twice")
}

// TestSeedOneActiveSyncUnderConcurrency: 20 product-sync requests for one verified store,
// each with its own key, released together → exactly one 202, 19 × 409
// PRODUCT_SYNC_ALREADY_ACTIVE naming the active sync (errors.active_sync_id), one row in
// product_syncs. The marketplace is slowed down so the accepted sync stays active for the
// whole burst.
func TestSeedOneActiveSyncUnderConcurrency(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t)
	acct := env.Register("seed-sync@example.com")
	storeID := seedVerifiedStore(t, env, acct, "sync")
	env.Work.Externals.MarketplaceSandbox.SetLatency(3 * time.Second)

	const n = 20
	resps := seedBurst(t, env.URL, "POST", seedWS(acct)+"/stores/"+storeID+"/product-syncs", acct.AccessToken, []byte(`{}`), n,
		func(int) map[string]string { return seedKey() })

	var accepted []servicetest.Response
	var conflicts []servicetest.Response
	for _, r := range resps {
		switch r.Status {
		case http.StatusAccepted:
			accepted = append(accepted, r)
		case http.StatusConflict:
			conflicts = append(conflicts, r)
		default:
			require.Failf(t, "unexpected answer", "%d %s", r.Status, r.Body)
		}
	}
	require.Len(t, accepted, 1)
	require.Len(t, conflicts, n-1)
	syncID := seedField(t, accepted[0], "sync", "id")
	for _, r := range conflicts {
		require.Equal(t, "PRODUCT_SYNC_ALREADY_ACTIVE", r.Code(), "%s", r.Body)
		var p struct {
			Errors map[string]string `json:"errors"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &p))
		require.Equal(t, syncID, p.Errors["active_sync_id"], "%s", r.Body)
	}
	require.Equal(t, 1, env.Count("SELECT count(*) FROM product_syncs WHERE store_id = $1", storeID))
	require.Equal(t, 1, env.Count("SELECT count(*) FROM operations WHERE workspace_id = $1 AND resource_type = 'product_sync'", acct.WorkspaceID))
}

// TestSeedNoRLSContext — guarantee 9: connected as app_user without app.workspace_id, after
// flows ran, nothing of the workspace can be read, claimed, updated or deleted; with
// another workspace's id none of this workspace's rows are visible; and the only way in
// without a context, outbox_due_workspaces, hands out workspace ids and nothing else. No
// dispatcher runs, so the workspace's outbox rows stay due the whole time: the claim below
// would take them if RLS let it (the positive control, with the context set, proves it).
func TestSeedNoRLSContext(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	ctx := context.Background()
	acct := env.Register("seed-rls@example.com")
	other := env.Register("seed-rls-other@example.com")
	ws := seedWS(acct)

	store := env.Do(servicetest.Request{Method: "POST", Path: ws + "/stores", Token: acct.AccessToken, Header: seedKey(), Body: seedStoreBody("rls")})
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	storeID := seedField(t, store, "store", "id")
	// Verification needs workers, which this test does not run: the owner marks the store
	// verified so that a publication can be requested.
	_, err := env.DB.Owner.Exec(ctx, "UPDATE stores SET status = 'verified' WHERE id = $1", storeID)
	require.NoError(t, err)
	productID := seedProduct(t, env, acct)
	pub := env.Do(servicetest.Request{Method: "POST", Path: ws + "/products/" + productID + "/publications", Token: acct.AccessToken,
		Header: seedKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	ai := env.Do(servicetest.Request{Method: "POST", Path: ws + "/ai-tasks", Token: acct.AccessToken, Header: seedKey(),
		Body: map[string]any{"kind": "text", "product_id": productID, "input": map[string]string{"prompt": "x"}}})
	require.Equal(t, http.StatusAccepted, ai.Status, "%s", ai.Body)
	otherProduct := seedProduct(t, env, other)

	tables := []string{"outbox_events", "operations", "publications", "stores", "store_verifications", "ai_tasks",
		"products", "idempotency_requests"}
	for _, table := range tables {
		require.Positive(t, env.Count("SELECT count(*) FROM "+table+" WHERE workspace_id = $1", acct.WorkspaceID), "owner sees %s", table)
	}
	pending := env.Count("SELECT count(*) FROM outbox_all_events WHERE workspace_id = $1 AND status = 'pending'", acct.WorkspaceID)
	require.GreaterOrEqual(t, pending, 3)

	conn, err := pgx.Connect(ctx, env.DB.AppURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var role string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_user").Scan(&role))
	require.Equal(t, "app_user", role)

	// No context: reads see nothing.
	for _, table := range tables {
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n), table)
		require.Zero(t, n, "app_user without context reads %s", table)
	}

	// No context: the dispatcher's claim claims nothing, writes change nothing.
	require.Zero(t, seedClaim(t, conn, "", acct.WorkspaceID), "claim without context")
	for _, stmt := range []string{
		"UPDATE outbox_events SET status = 'dead_letter'",
		"UPDATE outbox_events SET next_attempt_at = now() WHERE workspace_id = '" + acct.WorkspaceID + "'",
		"DELETE FROM outbox_events",
		"UPDATE operations SET status = 'failed'",
		"UPDATE publications SET status = 'failed'",
		"DELETE FROM idempotency_requests",
	} {
		tag, err := conn.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
		require.Zero(t, tag.RowsAffected(), stmt)
	}

	// Another workspace's context: none of this workspace's rows.
	for _, table := range tables {
		var n int
		require.NoError(t, seedInScope(ctx, conn, other.WorkspaceID, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE workspace_id = $1", acct.WorkspaceID).Scan(&n)
		}), table)
		require.Zero(t, n, "workspace %s reads %s of another", other.WorkspaceID, table)
	}
	require.Zero(t, seedClaim(t, conn, other.WorkspaceID, acct.WorkspaceID), "claim from another workspace")
	require.NoError(t, seedInScope(ctx, conn, other.WorkspaceID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM outbox_events WHERE workspace_id = $1", acct.WorkspaceID)
		require.Zero(t, tag.RowsAffected())
		return err
	}))
	var own int
	require.NoError(t, seedInScope(ctx, conn, other.WorkspaceID, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT count(*) FROM products WHERE id = $1", otherProduct).Scan(&own)
	}))
	require.Equal(t, 1, own, "the other workspace sees its own rows (its context works)")

	// The way in without a context: workspace ids only, and with an id alone a claim still
	// needs the context.
	rows, err := conn.Query(ctx, "SELECT * FROM outbox_due_workspaces(now(), 1000)")
	require.NoError(t, err)
	var cols []string
	for _, f := range rows.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.Equal(t, []string{"workspace_id"}, cols)
	require.Contains(t, ids, uuid.MustParse(acct.WorkspaceID))
	require.Zero(t, seedClaim(t, conn, "", acct.WorkspaceID), "claim with a discovered id but no context")

	// Nothing changed, and the claim is the right one: with the context it takes every
	// due row (rolled back).
	require.Equal(t, pending, env.Count("SELECT count(*) FROM outbox_all_events WHERE workspace_id = $1 AND status = 'pending'", acct.WorkspaceID))
	require.Equal(t, pending, seedClaim(t, conn, acct.WorkspaceID, acct.WorkspaceID), "positive control")
	require.Equal(t, pending, env.Count("SELECT count(*) FROM outbox_all_events WHERE workspace_id = $1 AND status = 'pending'", acct.WorkspaceID))
}

// seedClaimSQL is the dispatcher's claim (infra/outbox/dispatcher.go, Dispatcher.claim).
const seedClaimSQL = `
	WITH c AS (
	  SELECT id, (locked_until IS NOT NULL)::int AS expired FROM outbox_events
	  WHERE workspace_id = $1 AND status = 'pending' AND next_attempt_at <= now()
	    AND (locked_until IS NULL OR locked_until <= now())
	  ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED)
	UPDATE outbox_events o
	SET locked_by = $3, locked_until = now() + $4 * interval '1 millisecond',
	    attempt_count = o.attempt_count + c.expired
	FROM c WHERE o.id = c.id
	RETURNING o.id`

// seedClaim runs the dispatcher's claim for target's rows in a transaction whose
// app.workspace_id is scope ("" = none), counts the claimed rows and rolls back.
func seedClaim(t testing.TB, conn *pgx.Conn, scope, target string) int {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	if scope != "" {
		_, err = tx.Exec(ctx, "SELECT set_config('app.workspace_id', $1, true)", scope)
		require.NoError(t, err)
	}
	rows, err := tx.Query(ctx, seedClaimSQL, target, 500, "seed-test-claim", 30000)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return len(ids)
}

// seedInScope runs fn in a transaction with app.workspace_id = ws, then rolls back.
func seedInScope(ctx context.Context, conn *pgx.Conn, ws string, fn func(tx pgx.Tx) error) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT set_config('app.workspace_id', $1, true)", ws); err != nil {
		return err
	}
	return fn(tx)
}

// seedChildEnv is a servicetest.Env for HTTP helpers (Do, Register, Count) against a
// service run as a child process at base.
func seedChildEnv(t testing.TB, db *pgtest.DB, base string) *servicetest.Env {
	return &servicetest.Env{T: t, DB: db, URL: base}
}

// seedOutboxRow is one outbox row as the owner sees it.
type seedOutboxRow struct {
	ID       string
	Status   string
	LockedBy string
}

func seedOutbox(t testing.TB, db *pgtest.DB, ws, destination string) seedOutboxRow {
	t.Helper()
	var r seedOutboxRow
	require.NoError(t, db.Owner.QueryRow(context.Background(),
		`SELECT id::text, status, coalesce(locked_by, '') FROM outbox_all_events WHERE workspace_id = $1 AND destination = $2`,
		ws, destination).Scan(&r.ID, &r.Status, &r.LockedBy))
	return r
}

// seedWaitStatus waits until the owner reads want from query (one text column).
func seedWaitStatus(t testing.TB, db *pgtest.DB, want, query string, args ...any) {
	t.Helper()
	var got string
	seedEventually(t, 30*time.Second, func() bool {
		require.NoError(t, db.Owner.QueryRow(context.Background(), query, args...).Scan(&got))
		return got == want
	}, "want %q from %s, last %q", want, query, &got)
}

// seedJobCount counts where BullMQ holds jobId id in queue: the job hash, and the id in the
// wait, active, completed, failed and delayed structures. One job = hash 1, places 1.
func seedJobCount(t testing.TB, rdb *redis.Client, prefix, queue, id string) (hash, places int) {
	t.Helper()
	ctx := context.Background()
	k := prefix + ":" + queue + ":"
	n, err := rdb.Exists(ctx, k+id).Result()
	require.NoError(t, err)
	for _, list := range []string{"wait", "active"} {
		ids, err := rdb.LRange(ctx, k+list, 0, -1).Result()
		require.NoError(t, err)
		for _, v := range ids {
			if v == id {
				places++
			}
		}
	}
	for _, set := range []string{"completed", "failed", "delayed", "prioritized"} {
		if err := rdb.ZScore(ctx, k+set, id).Err(); err == nil {
			places++
		} else {
			require.ErrorIs(t, err, redis.Nil)
		}
	}
	return int(n), places
}

// seedForgetJobID removes id from the dedup window's buckets of queue (the "dd:" sets, a UUID
// as its 16 bytes), as if the window had passed: the same id added again is a new job.
func seedForgetJobID(t testing.TB, rdb *redis.Client, prefix, queue, id string) {
	t.Helper()
	ctx := context.Background()
	u := uuid.MustParse(id)
	iter := rdb.Scan(ctx, 0, prefix+":"+queue+":dd:*", 1000).Iterator()
	for iter.Next(ctx) {
		require.NoError(t, rdb.SRem(ctx, iter.Val(), string(u[:])).Err())
	}
	require.NoError(t, iter.Err())
}

// seedJobCompleted reports whether job id of queue is finished and in the completed set.
func seedJobCompleted(t testing.TB, rdb *redis.Client, prefix, queue, id string) bool {
	t.Helper()
	err := rdb.ZScore(context.Background(), prefix+":"+queue+":completed", id).Err()
	if err == redis.Nil {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestSeedCrashAfterCommitBeforeDelivery — guarantee 5: the API process commits a store (and
// its outbox row), answers 201 and is SIGKILLed before anything was delivered (no
// dispatcher runs; Redis holds no job). A dispatcher and workers started afterwards, as
// new processes, deliver the event: the verification succeeds, BullMQ holds exactly one job
// for the event id, and the marketplace saw one verification. If the event lived anywhere
// but in the committed transaction (memory of the API process, a publish after commit),
// the kill would lose it and the operation would never finish.
func TestSeedCrashAfterCommitBeforeDelivery(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	prefix := seedPrefix()
	rdb := seedRedis(t, prefix)
	serve, base := seedStartServe(t, db.AppURL, prefix)
	env := seedChildEnv(t, db, base)
	acct := env.Register("seed-crash@example.com")
	store := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/stores", Token: acct.AccessToken,
		Header: seedKey(), Body: seedStoreBody("crash")})
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	opID := seedField(t, store, "operation", "id")

	ev := seedOutbox(t, db, acct.WorkspaceID, "store-verification")
	require.Equal(t, "pending", ev.Status)
	hash, places := seedJobCount(t, rdb, prefix, "store-verification", ev.ID)
	require.Zero(t, hash+places, "delivered before the crash")
	serve.kill(t)

	seedStartDispatch(t, db.AppURL, prefix)
	_, sandbox := seedStartWork(t, db.AppURL, prefix, nil)
	seedWaitStatus(t, db, "succeeded", "SELECT status FROM operations WHERE id = $1", opID)
	seedWaitStatus(t, db, "dispatched", "SELECT status FROM outbox_all_events WHERE id = $1", ev.ID)
	seedEventually(t, 30*time.Second, func() bool { return seedJobCompleted(t, rdb, prefix, "store-verification", ev.ID) },
		"job %s never completed", ev.ID)

	hash, places = seedJobCount(t, rdb, prefix, "store-verification", ev.ID)
	require.Equal(t, 1, hash)
	require.Equal(t, 1, places)
	require.Equal(t, 1, env.Count("SELECT count(*) FROM outbox_all_events WHERE workspace_id = $1 AND destination = 'store-verification'", acct.WorkspaceID))
	require.Equal(t, "verified", seedOne(t, db, "SELECT status FROM stores WHERE workspace_id = $1", acct.WorkspaceID))
	require.Equal(t, 1, seedSandboxStats(t, sandbox).Calls[marketplace.EndpointVerify])
}

// seedOne reads one text value as the owner.
func seedOne(t testing.TB, db *pgtest.DB, query string, args ...any) string {
	t.Helper()
	var v string
	require.NoError(t, db.Owner.QueryRow(context.Background(), query, args...).Scan(&v))
	return v
}

// seedGateSQL makes the dispatcher's mark (the move of a leased event to the log) wait
// while seed_gate names its destination. It lets a test stop a real dispatcher exactly
// between its publish to BullMQ and its mark, and SIGKILL it there. Test instrumentation
// of the test database, created by the owner; the product's schema is unchanged.
const seedGateSQL = `
CREATE TABLE seed_gate (destination text PRIMARY KEY);
CREATE FUNCTION seed_gate_mark() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
  IF OLD.locked_by IS NOT NULL THEN
    WHILE EXISTS (SELECT 1 FROM seed_gate WHERE destination = OLD.destination) LOOP
      PERFORM pg_sleep(0.02);
    END LOOP;
  END IF;
  RETURN OLD;
END $$;
CREATE TRIGGER seed_gate_mark BEFORE DELETE ON outbox_events FOR EACH ROW EXECUTE FUNCTION seed_gate_mark();`

// seedFront serves the marketplace sandbox; with hold set, the first POST /v1/products is
// performed (the product exists) and then never answered, as if the worker died before it
// read the answer: created is closed then, and the request waits for its client to go.
type seedFront struct {
	sb      *marketplace.Sandbox
	hold    bool
	once    sync.Once
	created chan struct{}
}

func (f *seedFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	held := false
	if f.hold && r.Method == http.MethodPost && r.URL.Path == "/v1/products" {
		f.once.Do(func() { held = true })
	}
	if !held {
		f.sb.ServeHTTP(w, r)
		return
	}
	f.sb.ServeHTTP(httptest.NewRecorder(), r)
	close(f.created)
	<-r.Context().Done()
}

// TestSeedAcceptedButNotMarked — guarantees 5, 6: "BullMQ accepted the job but the Dispatcher did
// not mark it". A real `app dispatch` child claims the publication's outbox row, publishes
// the job and is SIGKILLed while its mark waits (seed_gate); its lease then expires and a
// second dispatcher publishes the event again under the same jobId. The repeated delivery
// must not create a second platform product:
//
//   - job_kept: the first job is still in Redis → the second publish is a duplicate, BullMQ
//     holds one job, which ran once (BullMQ jobId deduplication).
//   - job_removed: the first job completed and was then removed from Redis (job hash and
//     de: key deleted) → a second job is created and runs; the finished publication stops
//     it before any platform call (domain state, Step A of app/worker/publish).
//   - job_removed_worker_died_key_ignored: the marketplace ignores Idempotency-Key, and the
//     first worker (an `app work` child) died after the platform created the product and
//     before the publication was recorded; the job is removed → the second job finds the
//     publication still running, so only the handler's lookup by external_ref stands
//     between it and a second product. Had the handler skipped its lookup, it would call
//     POST /v1/products again, the sandbox (ignoring the key) would create product #2 and
//     ProductsWithRef would be 2: this case fails. (The two other cases do not depend on
//     the lookup: there the job dedup or the finished publication already stop it.)
func TestSeedAcceptedButNotMarked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                          string
		remove, ignoreKey, workerDies bool
	}{
		{name: "job_kept"},
		{name: "job_removed", remove: true},
		{name: "job_removed_worker_died_key_ignored", remove: true, ignoreKey: true, workerDies: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			seedAcceptedButNotMarked(t, c.remove, c.ignoreKey, c.workerDies)
		})
	}
}

func seedAcceptedButNotMarked(t *testing.T, remove, ignoreKey, workerDies bool) {
	ctx := context.Background()
	const queue = "listing-publish"
	prefix := seedPrefix()
	rdb := seedRedis(t, prefix)
	sb, err := marketplace.New(marketplace.Config{})
	require.NoError(t, err)
	sb.SetIgnoreIdempotencyKey(ignoreKey)
	front := &seedFront{sb: sb, hold: workerDies, created: make(chan struct{})}
	srv, err := sandbox.Start("", front)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	// The dead worker's call fences its task for two platform time-outs (the call fence):
	// a short time-out keeps the redelivery's wait for it well inside seedWaitStatus's bound.
	workEnv := map[string]string{"PLATFORM_BASE_URL": srv.URL, "PLATFORM_TIMEOUT": "5s"}

	env := servicetest.Start(t, func(c *config.Config) { c.BullMQPrefix = prefix })
	db := env.DB
	_, err = db.Owner.Exec(ctx, seedGateSQL)
	require.NoError(t, err)
	d1 := seedStartDispatch(t, db.AppURL, prefix)
	w1, _ := seedStartWork(t, db.AppURL, prefix, workEnv)

	acct := env.Register("seed-ambiguous@example.com")
	storeID := seedVerifiedStore(t, env, acct, "ambiguous")
	productID := seedProduct(t, env, acct)
	_, err = db.Owner.Exec(ctx, "INSERT INTO seed_gate VALUES ($1)", queue)
	require.NoError(t, err)
	pub := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products/" + productID + "/publications",
		Token: acct.AccessToken, Header: seedKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	pubID, opID := seedField(t, pub, "publication", "id"), seedField(t, pub, "operation", "id")
	ev := seedOutbox(t, db, acct.WorkspaceID, queue)

	// The first dispatcher published (BullMQ accepted the job) and waits in its mark.
	seedEventually(t, 30*time.Second, func() bool { h, _ := seedJobCount(t, rdb, prefix, queue, ev.ID); return h == 1 },
		"job %s never published", ev.ID)
	if workerDies {
		select {
		case <-front.created:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "the worker never created the platform product")
		}
		w1.kill(t)
		require.Equal(t, "running", seedOne(t, db, "SELECT status FROM publications WHERE id = $1", pubID))
	} else {
		seedWaitStatus(t, db, "succeeded", "SELECT status FROM operations WHERE id = $1", opID)
		seedEventually(t, 30*time.Second, func() bool { return seedJobCompleted(t, rdb, prefix, queue, ev.ID) }, "first job never completed")
	}
	require.Equal(t, 1, sb.ProductsWithRef(pubID))
	require.Equal(t, "dispatching", seedOutbox(t, db, acct.WorkspaceID, queue).Status, "the mark must not have happened")
	d1.kill(t)
	// The killed dispatcher's backend runs on until it next talks to its client, and its mark
	// is pipelined (statement and commit already sent): opening the gate now would let the
	// mark commit. A crashed dispatcher host takes its session with it; end the session so
	// the mark rolls back, as it would then.
	_, err = db.Owner.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event = 'PgSleep'`)
	require.NoError(t, err)
	seedEventually(t, 30*time.Second, func() bool {
		var n int
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'PgSleep'`).Scan(&n))
		return n == 0
	}, "the dead dispatcher's session is still running")
	_, err = db.Owner.Exec(ctx, "DELETE FROM seed_gate")
	require.NoError(t, err)

	if remove {
		k := prefix + ":" + queue + ":"
		require.NoError(t, rdb.Del(ctx, k+ev.ID, k+ev.ID+":lock", k+ev.ID+":logs", k+"de:"+ev.ID).Err())
		require.NoError(t, rdb.LRem(ctx, k+"active", 0, ev.ID).Err())
		require.NoError(t, rdb.ZRem(ctx, k+"completed", ev.ID).Err())
		require.NoError(t, rdb.SRem(ctx, k+"stalled", ev.ID).Err())
		seedForgetJobID(t, rdb, prefix, queue, ev.ID)
		h, places := seedJobCount(t, rdb, prefix, queue, ev.ID)
		require.Zero(t, h+places)
	}
	// The killed dispatcher's lease runs out (time travel: 30 s saved). This waits for the
	// row lock of its dead session, which rolled back the mark.
	_, err = db.Owner.Exec(ctx, "UPDATE outbox_events SET locked_until = now() WHERE id = $1 AND locked_by IS NOT NULL", ev.ID)
	require.NoError(t, err)
	if workerDies {
		seedStartWork(t, db.AppURL, prefix, workEnv)
	}
	seedStartDispatch(t, db.AppURL, prefix)

	seedWaitStatus(t, db, "dispatched", "SELECT status FROM outbox_all_events WHERE id = $1", ev.ID)
	seedWaitStatus(t, db, "succeeded", "SELECT status FROM operations WHERE id = $1", opID)
	seedEventually(t, 30*time.Second, func() bool { return seedJobCompleted(t, rdb, prefix, queue, ev.ID) }, "job never completed")
	require.Equal(t, "1", seedOne(t, db, "SELECT attempt_count::text FROM outbox_all_events WHERE id = $1", ev.ID),
		"the event was claimed twice: 0 for the first claim, +1 for the reclaimed expired lease")

	h, places := seedJobCount(t, rdb, prefix, queue, ev.ID)
	require.Equal(t, 1, h, "job hash")
	require.Equal(t, 1, places, "BullMQ holds one job for the event")
	if !remove {
		ats, err := rdb.HGet(ctx, prefix+":"+queue+":"+ev.ID, "ats").Result()
		require.NoError(t, err)
		require.Equal(t, "1", ats, "the kept job ran once")
		require.True(t, seedStreamHas(t, rdb, prefix+":"+queue+":events", "duplicated", ev.ID), "no second publish seen")
	}
	require.Equal(t, 1, sb.ProductsWithRef(pubID), "platform products for publication %s", pubID)
	require.Equal(t, 1, sb.Stats().ProductsCreated)
	require.Equal(t, "succeeded", seedOne(t, db, "SELECT status FROM publications WHERE id = $1", pubID))
	require.NotEmpty(t, seedOne(t, db, "SELECT external_product_id FROM publications WHERE id = $1", pubID))
}

// seedStreamHas reports whether the BullMQ events stream has event for jobID.
func seedStreamHas(t testing.TB, rdb *redis.Client, stream, event, jobID string) bool {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	require.NoError(t, err)
	for _, m := range msgs {
		if m.Values["event"] == event && m.Values["jobId"] == jobID {
			return true
		}
	}
	return false
}
