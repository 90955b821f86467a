package tests

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/internal/servicetest"
)

// idemSend sends one request with exactly the headers given (several values of one header
// become several header lines), a JSON Content-Type when there is a body.
func idemSend(t *testing.T, env *servicetest.Env, method, path, token string, header http.Header, body string) servicetest.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	// Bounded, so that a request that blocks (e.g. waiting for another's lock instead of
	// answering "in progress") fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, method, env.URL+path, rd)
	require.NoError(t, err)
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	for k, vs := range header {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return servicetest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

func idemHeader(key string) http.Header { return http.Header{"Idempotency-Key": {key}} }

// idemRows counts idempotency records (all, or those of one key) as the owner.
func idemRows(env *servicetest.Env, key string) int {
	if key == "" {
		return env.Count(`SELECT count(*) FROM idempotency_requests`)
	}
	return env.Count(`SELECT count(*) FROM idempotency_requests WHERE idempotency_key = $1`, key)
}

// idemAssertReplay checks that replay is first answered again: same status, byte-identical
// body, the same content headers, Idempotent-Replayed only on the replay and the retention on
// both.
func idemAssertReplay(t *testing.T, first, replay servicetest.Response) {
	t.Helper()
	require.Equal(t, first.Status, replay.Status, "replay: %s", replay.Body)
	require.Equal(t, string(first.Body), string(replay.Body))
	for _, h := range []string{"Content-Type", "Location", "ETag", "Content-Length", "Cache-Control"} {
		require.Equal(t, first.Header.Values(h), replay.Header.Values(h), "header %s", h)
	}
	require.Empty(t, first.Header.Values("Idempotent-Replayed"), "a first execution is not a replay")
	require.Equal(t, []string{"true"}, replay.Header.Values("Idempotent-Replayed"))
	require.Equal(t, []string{"172800"}, first.Header.Values("Idempotency-Retention"))
	require.Equal(t, []string{"172800"}, replay.Header.Values("Idempotency-Retention"))
}

// TestIdempotencyHTTPKeyValidation: a missing key is IDEMPOTENCY_KEY_MISSING; a key that is
// not one UUID (malformed, nil, repeated header) is IDEMPOTENCY_KEY_INVALID; none of them
// writes an idempotency record or a resource. Auth endpoints ignore the header entirely.
func TestIdempotencyHTTPKeyValidation(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	require.Equal(t, 48*time.Hour, env.Config.IdempotencyRetention, "the assertions expect the default retention")
	acct := env.Register("keys@example.com")
	path := "/v1/workspaces/" + acct.WorkspaceID + "/stores"
	body := `{"platform":"sandbox","shop_id":"shop-1","name":"Shop","credentials":{"api_key":"sk_test_keys"}}`
	valid := uuid.NewString()

	cases := []struct {
		name   string
		header http.Header
		code   string
	}{
		{"no header", http.Header{}, "IDEMPOTENCY_KEY_MISSING"},
		{"blank value", idemHeader("  "), "IDEMPOTENCY_KEY_MISSING"},
		{"not a uuid", idemHeader("order-42"), "IDEMPOTENCY_KEY_INVALID"},
		{"truncated uuid", idemHeader(valid[:35]), "IDEMPOTENCY_KEY_INVALID"},
		{"uuid without dashes", idemHeader(strings.ReplaceAll(valid, "-", "")), "IDEMPOTENCY_KEY_INVALID"},
		{"uuid in braces", idemHeader("{" + valid + "}"), "IDEMPOTENCY_KEY_INVALID"},
		{"urn uuid", idemHeader("urn:uuid:" + valid), "IDEMPOTENCY_KEY_INVALID"},
		{"nil uuid", idemHeader(uuid.Nil.String()), "IDEMPOTENCY_KEY_INVALID"},
		{"two uuids in one line", idemHeader(valid + ", " + uuid.NewString()), "IDEMPOTENCY_KEY_INVALID"},
		{"header repeated with the same uuid", http.Header{"Idempotency-Key": {valid, valid}}, "IDEMPOTENCY_KEY_INVALID"},
		{"header repeated with two uuids", http.Header{"Idempotency-Key": {valid, uuid.NewString()}}, "IDEMPOTENCY_KEY_INVALID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := idemSend(t, env, "POST", path, acct.AccessToken, c.header, body)
			badProblem(t, resp, http.StatusBadRequest, c.code)
			require.Zero(t, idemRows(env, ""))
			require.Zero(t, env.Count(`SELECT count(*) FROM stores`))
			require.Zero(t, env.Count(`SELECT count(*) FROM operations`))
			require.Zero(t, env.Count(`SELECT count(*) FROM outbox_all_events`))
		})
	}
	// The same checks on an endpoint with a path id and an empty body.
	resp := idemSend(t, env, "POST", path+"/"+uuid.NewString()+"/verifications", acct.AccessToken, http.Header{}, `{}`)
	badProblem(t, resp, http.StatusBadRequest, "IDEMPOTENCY_KEY_MISSING")

	// The valid key then works (the refusals did not burn it).
	resp = idemSend(t, env, "POST", path, acct.AccessToken, idemHeader(valid), body)
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, 1, idemRows(env, valid))

	t.Run("auth endpoints write no idempotency record", func(t *testing.T) {
		before := idemRows(env, "")
		k := idemHeader(uuid.NewString())
		reg := idemSend(t, env, "POST", "/v1/auth/register", "", k,
			`{"email":"keys2@example.com","password":"correct horse battery staple","workspace_name":"W"}`)
		require.Equal(t, http.StatusCreated, reg.Status, "%s", reg.Body)
		require.Empty(t, reg.Header.Values("Idempotency-Retention"))
		login := idemSend(t, env, "POST", "/v1/auth/login", "", k,
			`{"email":"keys2@example.com","password":"correct horse battery staple"}`)
		require.Equal(t, http.StatusOK, login.Status, "%s", login.Body)
		// The same key again is not a replay: a fresh login with new tokens.
		again := idemSend(t, env, "POST", "/v1/auth/login", "", k,
			`{"email":"keys2@example.com","password":"correct horse battery staple"}`)
		require.Equal(t, http.StatusOK, again.Status, "%s", again.Body)
		require.Empty(t, again.Header.Values("Idempotent-Replayed"))
		require.NotEqual(t, login.JSON(t)["refresh_token"], again.JSON(t)["refresh_token"])
		refresh := idemSend(t, env, "POST", "/v1/auth/refresh", "", k,
			`{"refresh_token":"`+login.JSON(t)["refresh_token"].(string)+`"}`)
		require.Equal(t, http.StatusOK, refresh.Status, "%s", refresh.Body)
		bad := idemSend(t, env, "POST", "/v1/auth/login", "", http.Header{"Idempotency-Key": {"nonsense", "x"}},
			`{"email":"keys2@example.com","password":"correct horse battery staple"}`)
		require.Equal(t, http.StatusOK, bad.Status, "auth ignores the header: %s", bad.Body)
		require.Equal(t, before, idemRows(env, ""))
		require.Zero(t, env.Count(`SELECT count(*) FROM idempotency_requests WHERE path LIKE '%auth%'`))
	})
}

// TestIdempotencyHTTPReplay: a completed request is replayed byte for byte (status, body,
// Content-Type, Location, ETag) with Idempotent-Replayed and the retention; key order and
// white space do not change the fingerprint, a different value does (IDEMPOTENCY_KEY_REUSED);
// the handler ran once.
func TestIdempotencyHTTPReplay(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	acct := env.Register("replay@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID

	t.Run("store", func(t *testing.T) {
		key := uuid.NewString()
		body := `{"platform":"sandbox","shop_id":"shop-1","name":"Shop","credentials":{"api_key":"sk_test_replay"}}`
		first := idemSend(t, env, "POST", ws+"/stores", acct.AccessToken, idemHeader(key), body)
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
		require.Equal(t, "application/json", first.Header.Get("Content-Type"))
		events := env.Count(`SELECT count(*) FROM outbox_all_events`)
		require.Positive(t, events)

		replay := idemSend(t, env, "POST", ws+"/stores", acct.AccessToken, idemHeader(key), body)
		idemAssertReplay(t, first, replay)

		reordered := "{\n  \"credentials\" : { \"api_key\" : \"sk_test_replay\" },\n\t\"name\":\"Shop\",   \"shop_id\": \"shop-1\",\r\n \"platform\":\"sandbox\"\n}\n"
		idemAssertReplay(t, first, idemSend(t, env, "POST", ws+"/stores", acct.AccessToken, idemHeader(key), reordered))
		// A key written in upper case is the same key.
		idemAssertReplay(t, first, idemSend(t, env, "POST", ws+"/stores", acct.AccessToken, idemHeader(strings.ToUpper(key)), body))

		for name, other := range map[string]string{
			"another name":       `{"platform":"sandbox","shop_id":"shop-1","name":"Shop 2","credentials":{"api_key":"sk_test_replay"}}`,
			"another credential": `{"platform":"sandbox","shop_id":"shop-1","name":"Shop","credentials":{"api_key":"sk_test_replaz"}}`,
			"another shop id":    `{"platform":"sandbox","shop_id":"shop-2","name":"Shop","credentials":{"api_key":"sk_test_replay"}}`,
			"name with a space":  `{"platform":"sandbox","shop_id":"shop-1","name":"Shop ","credentials":{"api_key":"sk_test_replay"}}`,
		} {
			resp := idemSend(t, env, "POST", ws+"/stores", acct.AccessToken, idemHeader(key), other)
			badProblem(t, resp, http.StatusConflict, "IDEMPOTENCY_KEY_REUSED")
			require.Empty(t, resp.Header.Values("Idempotent-Replayed"), name)
		}
		// Executed once: one store, one verification, one operation, its events, one record.
		require.Equal(t, 1, env.Count(`SELECT count(*) FROM stores`))
		require.Equal(t, 1, env.Count(`SELECT count(*) FROM store_verifications`))
		require.Equal(t, 1, env.Count(`SELECT count(*) FROM operations`))
		require.Equal(t, events, env.Count(`SELECT count(*) FROM outbox_all_events`))
		require.Equal(t, 1, idemRows(env, key))
		// The stored response is the one the client got.
		require.Equal(t, 1, env.Count(`SELECT count(*) FROM idempotency_requests WHERE idempotency_key = $1
			AND status = 'completed' AND response_status = 201 AND response_body = $2`, key, first.Body))
	})

	t.Run("product with Location and ETag", func(t *testing.T) {
		key := uuid.NewString()
		body := `{"title":"Mug","description":"White","price":"9.90","currency":"EUR","images":["https://cdn.example.com/a.jpg","https://cdn.example.com/b.jpg"]}`
		first := idemSend(t, env, "POST", ws+"/products", acct.AccessToken, idemHeader(key), body)
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
		require.NotEmpty(t, first.Header.Get("Location"))
		require.Equal(t, `"1"`, first.Header.Get("ETag"))
		idemAssertReplay(t, first, idemSend(t, env, "POST", ws+"/products", acct.AccessToken, idemHeader(key), body))
		spaced := ` { "images" : [ "https://cdn.example.com/a.jpg" , "https://cdn.example.com/b.jpg" ] , "currency":"EUR","price":"9.90","description":"White","title":"Mug" } `
		idemAssertReplay(t, first, idemSend(t, env, "POST", ws+"/products", acct.AccessToken, idemHeader(key), spaced))
		// Array order is meaning: another order is another request.
		swapped := `{"title":"Mug","description":"White","price":"9.90","currency":"EUR","images":["https://cdn.example.com/b.jpg","https://cdn.example.com/a.jpg"]}`
		badProblem(t, idemSend(t, env, "POST", ws+"/products", acct.AccessToken, idemHeader(key), swapped), http.StatusConflict, "IDEMPOTENCY_KEY_REUSED")
		require.Equal(t, 1, env.Count(`SELECT count(*) FROM products`))
	})

	t.Run("same key on another path is another request", func(t *testing.T) {
		key := uuid.NewString()
		a := idemSend(t, env, "POST", ws+"/products", acct.AccessToken, idemHeader(key), `{"title":"A","price":"1.00","currency":"EUR"}`)
		require.Equal(t, http.StatusCreated, a.Status, "%s", a.Body)
		b := idemSend(t, env, "POST", ws+"/stores", acct.AccessToken, idemHeader(key),
			`{"platform":"sandbox","shop_id":"shop-path","name":"S","credentials":{"api_key":"sk_test_path"}}`)
		require.Equal(t, http.StatusCreated, b.Status, "%s", b.Body)
		require.Empty(t, b.Header.Values("Idempotent-Replayed"))
		require.Equal(t, 2, idemRows(env, key))
	})
}

// TestIdempotencyHTTPScope: the same key sent by another user of the same workspace, or by
// the same user in another workspace, is a different request: both execute.
func TestIdempotencyHTTPScope(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	ctx := context.Background()
	alice := env.Register("alice@example.com")
	bob := env.Register("bob@example.com")
	// Set-up as the owner: bob joins alice's workspace; alice gets bob's workspace too.
	_, err := env.DB.Owner.Exec(ctx, `INSERT INTO workspace_memberships (workspace_id, user_id, role) VALUES ($1, $2, 'member'), ($3, $4, 'member')`,
		alice.WorkspaceID, bob.UserID, bob.WorkspaceID, alice.UserID)
	require.NoError(t, err)

	key := uuid.NewString()
	body := `{"platform":"sandbox","shop_id":"shop-1","name":"Shop","credentials":{"api_key":"sk_test_scope"}}`
	first := idemSend(t, env, "POST", "/v1/workspaces/"+alice.WorkspaceID+"/stores", alice.AccessToken, idemHeader(key), body)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	storeID := first.JSON(t)["store"].(map[string]any)["id"].(string)

	// Same user, same key, same body, another workspace: executes (a second store).
	other := idemSend(t, env, "POST", "/v1/workspaces/"+bob.WorkspaceID+"/stores", alice.AccessToken, idemHeader(key), body)
	require.Equal(t, http.StatusCreated, other.Status, "%s", other.Body)
	require.Empty(t, other.Header.Values("Idempotent-Replayed"))
	require.NotEqual(t, storeID, other.JSON(t)["store"].(map[string]any)["id"])
	require.Equal(t, 2, env.Count(`SELECT count(*) FROM stores`))

	// Another user, same workspace, same key, same body: not alice's replay. The store exists
	// already, so executing it is the domain's conflict — proof that it ran.
	dup := idemSend(t, env, "POST", "/v1/workspaces/"+alice.WorkspaceID+"/stores", bob.AccessToken, idemHeader(key), body)
	badProblem(t, dup, http.StatusConflict, "STORE_ALREADY_EXISTS")

	// And on an endpoint where both succeed: alice and bob verify the store with one key.
	vkey := uuid.NewString()
	verify := "/v1/workspaces/" + alice.WorkspaceID + "/stores/" + storeID + "/verifications"
	va := idemSend(t, env, "POST", verify, alice.AccessToken, idemHeader(vkey), `{}`)
	require.Equal(t, http.StatusAccepted, va.Status, "%s", va.Body)
	vb := idemSend(t, env, "POST", verify, bob.AccessToken, idemHeader(vkey), `{}`)
	require.Equal(t, http.StatusAccepted, vb.Status, "%s", vb.Body)
	require.Empty(t, vb.Header.Values("Idempotent-Replayed"))
	require.NotEqual(t, va.JSON(t)["operation"].(map[string]any)["id"], vb.JSON(t)["operation"].(map[string]any)["id"])
	// Each replays its own.
	idemAssertReplay(t, va, idemSend(t, env, "POST", verify, alice.AccessToken, idemHeader(vkey), `{}`))
	idemAssertReplay(t, vb, idemSend(t, env, "POST", verify, bob.AccessToken, idemHeader(vkey), `{}`))
	require.Equal(t, 3, env.Count(`SELECT count(*) FROM store_verifications WHERE store_id = $1`, storeID))
	require.Equal(t, 2, idemRows(env, vkey))
	require.Equal(t, 2, idemRows(env, key))
}

// TestIdempotencyHTTPInProgress: while a request holding a key is still executing (here,
// blocked on a store row lock inside its transaction), the same key is answered at once with
// 409 IDEMPOTENCY_REQUEST_IN_PROGRESS and Retry-After; once the first commits its answer is
// replayed.
func TestIdempotencyHTTPInProgress(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	ctx := context.Background()
	acct := env.Register("progress@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID
	created := idemSend(t, env, "POST", ws+"/stores", acct.AccessToken, idemHeader(uuid.NewString()),
		`{"platform":"sandbox","shop_id":"shop-1","name":"Shop","credentials":{"api_key":"sk_test_one"}}`)
	require.Equal(t, http.StatusCreated, created.Status, "%s", created.Body)
	storeID := created.JSON(t)["store"].(map[string]any)["id"].(string)
	path := ws + "/stores/" + storeID + "/authorization"
	body := `{"credentials":{"api_key":"sk_test_two"}}`
	key := uuid.NewString()

	// The owner locks the store row on a dedicated connection.
	lock, err := env.DB.Owner.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(context.WithoutCancel(ctx)) }()
	_, err = lock.Exec(ctx, `SELECT id FROM stores WHERE id = $1 FOR UPDATE`, storeID)
	require.NoError(t, err)

	firstDone := make(chan servicetest.Response, 1)
	go func() {
		// Not idemSend: require must not run off the test goroutine.
		r, _ := http.NewRequest("PUT", env.URL+path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+acct.AccessToken)
		r.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			firstDone <- servicetest.Response{}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		firstDone <- servicetest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	}()

	// Wait until the first request waits on the row lock (it then holds the key).
	require.Eventually(t, func() bool {
		return env.Count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND usename = 'app_user' AND wait_event_type = 'Lock'`) > 0
	}, 10*time.Second, 10*time.Millisecond, "the first request never blocked on the store row")

	for _, b := range []string{body, `{"credentials":{"api_key":"sk_test_three"}}`} {
		start := time.Now()
		second := idemSend(t, env, "PUT", path, acct.AccessToken, idemHeader(key), b)
		elapsed := time.Since(start)
		badProblem(t, second, http.StatusConflict, "IDEMPOTENCY_REQUEST_IN_PROGRESS")
		require.Less(t, elapsed, time.Second, "in progress must be answered at once, not after the first finishes")
		retry, err := strconv.Atoi(second.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After: %q", second.Header.Get("Retry-After"))
		require.GreaterOrEqual(t, retry, 1)
		require.LessOrEqual(t, retry, 5)
	}
	select {
	case <-firstDone:
		require.FailNow(t, "the first request finished while the store row was locked")
	default:
	}

	require.NoError(t, lock.Commit(ctx))
	var first servicetest.Response
	select {
	case first = <-firstDone:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the first request did not finish after the lock was released")
	}
	require.Equal(t, http.StatusAccepted, first.Status, "%s", first.Body)
	idemAssertReplay(t, first, idemSend(t, env, "PUT", path, acct.AccessToken, idemHeader(key), body))
	// Executed once: credentials replaced once (version 2), one verification more.
	require.Equal(t, 2, env.Count(`SELECT credentials_version FROM stores WHERE id = $1`, storeID))
	require.Equal(t, 2, env.Count(`SELECT count(*) FROM store_verifications WHERE store_id = $1`, storeID))
	require.Equal(t, 1, idemRows(env, key))
}

// TestIdempotencyHTTPRolledBack: a request whose transaction rolled back (publishing to an
// unverified store: 409 STORE_NOT_VERIFIED) leaves no record, so the same key executes once
// the store is verified, and is replayed after that.
func TestIdempotencyHTTPRolledBack(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t)
	acct := env.Register("rollback@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID

	store := idemSend(t, env, "POST", ws+"/stores", acct.AccessToken, idemHeader(uuid.NewString()),
		`{"platform":"sandbox","shop_id":"shop-1","name":"Shop","credentials":{"api_key":"sk_test_invalid_rollback"}}`)
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	storeID := store.JSON(t)["store"].(map[string]any)["id"].(string)
	env.WaitOperation(acct, store.JSON(t)["operation"].(map[string]any)["id"].(string))
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM stores WHERE id = $1 AND status = 'invalid'`, storeID))

	product := idemSend(t, env, "POST", ws+"/products", acct.AccessToken, nil, `{"title":"Mug","price":"9.90","currency":"EUR"}`)
	require.Equal(t, http.StatusCreated, product.Status, "%s", product.Body)
	publish := ws + "/products/" + product.JSON(t)["product"].(map[string]any)["id"].(string) + "/publications"
	body := `{"store_id":"` + storeID + `"}`
	key := uuid.NewString()

	for range 2 { // twice: the refusal is not stored and replayed either
		refused := idemSend(t, env, "POST", publish, acct.AccessToken, idemHeader(key), body)
		badProblem(t, refused, http.StatusConflict, "STORE_NOT_VERIFIED")
		require.Empty(t, refused.Header.Values("Idempotent-Replayed"))
		require.Zero(t, idemRows(env, key))
		require.Zero(t, env.Count(`SELECT count(*) FROM publications`))
	}

	auth := idemSend(t, env, "PUT", ws+"/stores/"+storeID+"/authorization", acct.AccessToken, idemHeader(uuid.NewString()),
		`{"credentials":{"api_key":"sk_test_rollback"}}`)
	require.Equal(t, http.StatusAccepted, auth.Status, "%s", auth.Body)
	op := env.WaitOperation(acct, auth.JSON(t)["operation"].(map[string]any)["id"].(string))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM stores WHERE id = $1 AND status = 'verified'`, storeID))

	accepted := idemSend(t, env, "POST", publish, acct.AccessToken, idemHeader(key), body)
	require.Equal(t, http.StatusAccepted, accepted.Status, "%s", accepted.Body)
	idemAssertReplay(t, accepted, idemSend(t, env, "POST", publish, acct.AccessToken, idemHeader(key), body))
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM publications`))
	require.Equal(t, 1, idemRows(env, key))
}
