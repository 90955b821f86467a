package tests

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/cloudevent"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/internal/redistest"
	"github.com/listingkit/listing/internal/servicetest"
)

// commandEnv is a running service with its command consumer, and a plain Redis client of the
// test that plays the other service: it sends command entries and reads the replies.
type commandEnv struct {
	*servicetest.Env
	rdb     *redis.Client
	stream  string
	replies string
	start   func()
}

// startCommands starts the whole service (API, dispatcher, workers) with streams of a prefix
// of its own; the command consumer starts when start is called.
func startCommands(t *testing.T, opts ...servicetest.Option) *commandEnv {
	t.Helper()
	prefix := "tc" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	env := servicetest.StartAll(t, append([]servicetest.Option{func(c *config.Config) { c.StreamPrefix = prefix }}, opts...)...)
	ropts, err := redis.ParseURL(env.Config.RedisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(ropts)
	ce := &commandEnv{Env: env, rdb: rdb, stream: env.API.Commands.Stream(), replies: env.API.Commands.Replies()}
	require.Equal(t, prefix+":commands", ce.stream)
	require.Equal(t, prefix+":command-replies", ce.replies)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var once sync.Once
	ce.start = func() {
		once.Do(func() {
			wg.Add(1)
			go func() { defer wg.Done(); _ = env.API.Commands.Run(ctx) }()
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = redistest.DeleteKeys(context.Background(), rdb, prefix+":*")
		_ = rdb.Close()
	})
	return ce
}

// command is a command CloudEvent as another service writes it, sent now.
func command(id, typ, workspaceID, integrationID string, data any) []byte {
	return commandAt(time.Now(), id, typ, workspaceID, integrationID, data)
}

// commandAt is a command CloudEvent whose time is at (none when at is zero).
func commandAt(at time.Time, id, typ, workspaceID, integrationID string, data any) []byte {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	b, err := cloudevent.Encode(cloudevent.Event{SpecVersion: "1.0", ID: id, Type: typ, Source: "/tests/erp", Time: at,
		DataContentType: "application/json", Data: raw, WorkspaceID: workspaceID, IntegrationID: integrationID})
	if err != nil {
		panic(err)
	}
	return b
}

func sign(secret string, event []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write(event)
	return hex.EncodeToString(h.Sum(nil))
}

// send adds one entry to the command stream and returns its id.
func (ce *commandEnv) send(t *testing.T, values map[string]any) string {
	t.Helper()
	id, err := ce.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: ce.stream, Values: values}).Result()
	require.NoError(t, err)
	return id
}

// repliesTo waits until n replies correlated with correlationID are in the replies stream
// (or fails after 30 s) and returns them.
func (ce *commandEnv) repliesTo(t *testing.T, correlationID string, n int) []cloudevent.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		msgs, err := ce.rdb.XRange(context.Background(), ce.replies, "-", "+").Result()
		require.NoError(t, err)
		var out []cloudevent.Event
		for _, m := range msgs {
			require.Len(t, m.Values, 1, "a reply entry has one field")
			ev, err := cloudevent.FromEntry(m.Values)
			require.NoError(t, err)
			if ev.CorrelationID == correlationID {
				out = append(out, ev)
			}
		}
		if len(out) >= n {
			require.Len(t, out, n, "replies to %s", correlationID)
			return out
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "replies missing", "%d of %d replies to %s", len(out), n, correlationID)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noReplyTo requires that no reply in the replies stream is correlated with correlationID.
func (ce *commandEnv) noReplyTo(t *testing.T, correlationID string) {
	t.Helper()
	msgs, err := ce.rdb.XRange(context.Background(), ce.replies, "-", "+").Result()
	require.NoError(t, err)
	for _, m := range msgs {
		ev, err := cloudevent.FromEntry(m.Values)
		require.NoError(t, err)
		require.NotEqual(t, correlationID, ev.CorrelationID, "a reply correlated by an id the entry claimed: %s", ev.Data)
	}
}

// problemCode is the code of a rejected reply's problem body.
func problemCode(t *testing.T, ev cloudevent.Event) string {
	t.Helper()
	require.Equal(t, "listing.command.rejected", ev.Type, "%s", ev.Data)
	require.Equal(t, "application/problem+json", ev.DataContentType)
	var p struct {
		Code string `json:"code"`
	}
	require.NoError(t, json.Unmarshal(ev.Data, &p))
	return p.Code
}

// pendingCount is how many entries of the stream the group holds unacknowledged.
func (ce *commandEnv) pendingCount(t *testing.T) int64 {
	t.Helper()
	p, err := ce.rdb.XPending(context.Background(), ce.stream, "listing").Result()
	require.NoError(t, err)
	return p.Count
}

// setupPublishing registers an account with a verified store and two products, and an
// integration of its workspace; it returns the account, the store, the products, and the
// integration's id and secret.
func setupPublishing(t *testing.T, ce *commandEnv, email string) (servicetest.Account, string, []string, string, string) {
	t.Helper()
	acct := ce.Register(email)
	ws := "/v1/workspaces/" + acct.WorkspaceID
	store := ce.Do(servicetest.Request{Method: "POST", Path: ws + "/stores", Token: acct.AccessToken, Header: idemKey(),
		Body: map[string]any{"platform": "sandbox", "shop_id": "shop-" + email, "name": "Shop", "credentials": map[string]string{"api_key": "sk_test_cmd"}}})
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	op := ce.WaitOperation(acct, store.JSON(t)["operation"].(map[string]any)["id"].(string))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	storeID := store.JSON(t)["store"].(map[string]any)["id"].(string)
	var products []string
	for _, title := range []string{"Mug", "Cup"} {
		p := ce.Do(servicetest.Request{Method: "POST", Path: ws + "/products", Token: acct.AccessToken,
			Body: map[string]any{"title": title, "price": "9.90", "currency": "EUR"}})
		require.Equal(t, http.StatusCreated, p.Status, "%s", p.Body)
		products = append(products, p.JSON(t)["product"].(map[string]any)["id"].(string))
	}
	in := ce.Do(servicetest.Request{Method: "POST", Path: ws + "/integrations", Token: acct.AccessToken, Body: map[string]any{"name": "ERP"}})
	require.Equal(t, http.StatusCreated, in.Status, "%s", in.Body)
	m := in.JSON(t)
	return acct, storeID, products, m["integration"].(map[string]any)["id"].(string), m["secret"].(string)
}

// A listing.publish command delivered twice (the second time to a consumer that crashed
// before acknowledging it, taken back after COMMANDS_CLAIM_IDLE) executes once: one
// publication, one idempotency record, and two accepted replies with equal data.
func TestCommandPublishTwiceExecutesOnce(t *testing.T) {
	t.Parallel()
	ce := startCommands(t, func(c *config.Config) { c.CommandsClaimIdle = 300 * time.Millisecond })
	acct, storeID, products, integID, secret := setupPublishing(t, ce, "cmd-twice@example.com")

	ev := command("cmd-publish-1", "listing.publish", acct.WorkspaceID, integID, map[string]any{"product_id": products[0], "store_id": storeID})
	entry := map[string]any{"event": ev, "signature": sign(secret, ev)}
	// The second delivery: a consumer of the group reads it and dies without acknowledging.
	require.NoError(t, ce.rdb.XGroupCreateMkStream(context.Background(), ce.stream, "listing", "0").Err())
	ce.send(t, entry)
	dead, err := ce.rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: "listing", Consumer: "crashed",
		Streams: []string{ce.stream, ">"}, Count: 1}).Result()
	require.NoError(t, err)
	require.Len(t, dead[0].Messages, 1)
	ce.send(t, entry)
	ce.start()

	replies := ce.repliesTo(t, "cmd-publish-1", 2)
	for _, r := range replies {
		require.Equal(t, "listing.command.accepted", r.Type, "%s", r.Data)
		require.Equal(t, acct.WorkspaceID, r.WorkspaceID)
		require.Equal(t, integID, r.IntegrationID)
		require.Equal(t, "/listing", r.Source)
	}
	require.JSONEq(t, string(replies[0].Data), string(replies[1].Data))
	var body struct {
		Publication struct {
			ID        string `json:"id"`
			ProductID string `json:"product_id"`
		} `json:"publication"`
		Operation struct {
			ID string `json:"id"`
		} `json:"operation"`
	}
	require.NoError(t, json.Unmarshal(replies[0].Data, &body))
	require.Equal(t, products[0], body.Publication.ProductID)
	require.NotEmpty(t, body.Operation.ID)

	require.Equal(t, 1, ce.Count(`SELECT count(*) FROM publications WHERE product_id = $1`, products[0]))
	require.Equal(t, 1, ce.Count(`SELECT count(*) FROM idempotency_requests WHERE method = 'MSG' AND path = '/listing.publish'`))
	// The command ran as the integration's user, and its operation completes like any other.
	require.Equal(t, 1, ce.Count(`SELECT count(*) FROM operations o JOIN users u ON u.id = o.created_by
		WHERE o.id = $1 AND u.kind = 'integration' AND u.email IS NULL AND u.password_hash IS NULL`, body.Operation.ID))
	op := ce.WaitOperation(acct, body.Operation.ID)
	require.Equal(t, "succeeded", op["status"], "%v", op)
	require.Eventually(t, func() bool { return ce.pendingCount(t) == 0 }, 10*time.Second, 50*time.Millisecond)

	// A command with credentials: the reply is the endpoint's answer, without them; the
	// store's verification runs as for HTTP.
	apiKey := "sk_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	ev = command("cmd-store-1", "listing.create_store", acct.WorkspaceID, integID, map[string]any{
		"platform": "sandbox", "shop_id": "shop-by-message", "name": "By message", "credentials": map[string]string{"api_key": apiKey}})
	ce.send(t, map[string]any{"event": ev, "signature": sign(secret, ev)})
	reply := ce.repliesTo(t, "cmd-store-1", 1)[0]
	require.Equal(t, "listing.command.accepted", reply.Type, "%s", reply.Data)
	require.NotContains(t, string(reply.Data), apiKey)
	var created struct {
		Store     struct{ ID, Status string }
		Operation struct{ ID string }
	}
	require.NoError(t, json.Unmarshal(reply.Data, &created))
	require.Equal(t, "pending_verification", created.Store.Status)
	op = ce.WaitOperation(acct, created.Operation.ID)
	require.Equal(t, "succeeded", op["status"], "%v", op)
	all, err := ce.rdb.XRange(context.Background(), ce.replies, "-", "+").Result()
	require.NoError(t, err)
	for _, m := range all {
		require.NotContains(t, m.Values[cloudevent.FieldEvent], apiKey)
	}
	require.NotContains(t, ce.Logs(), apiKey)

	// The secret appears in no log line and no stored row.
	require.NotContains(t, ce.Logs(), secret)
	require.Zero(t, ce.Count(`SELECT count(*) FROM integrations WHERE position(convert_to($1, 'UTF8') in secret_sealed) > 0`, secret))
	require.Zero(t, ce.Count(`SELECT count(*) FROM idempotency_requests WHERE position(convert_to($1, 'UTF8') in response_body) > 0`, secret))
}

// A forged signature, a foreign workspace and a revoked integration are each refused with a
// rejected reply (COMMAND_UNAUTHENTICATED) and nothing written; bad messages are answered,
// acknowledged and counted, and never block the stream.
func TestCommandRefusals(t *testing.T) {
	t.Parallel()
	ce := startCommands(t)
	acct, storeID, products, integID, secret := setupPublishing(t, ce, "cmd-refused@example.com")
	other := ce.Register("cmd-other@example.com")
	ce.start()
	data := map[string]any{"product_id": products[1], "store_id": storeID}
	ws := "/v1/workspaces/" + acct.WorkspaceID

	before := badCounts(t, ce.Env)
	integrationsBefore := ce.Count(`SELECT count(*) FROM integrations`)
	// An entry that is not authenticated is answered by its stream entry id, never by the id
	// it claims (which a sender reading replies by correlationid would take for its own).
	refused := func(id string, values map[string]any) {
		t.Helper()
		entry := ce.send(t, values)
		r := ce.repliesTo(t, entry, 1)[0]
		require.Equal(t, "COMMAND_UNAUTHENTICATED", problemCode(t, r), "%s", r.Data)
		require.Empty(t, r.WorkspaceID, "an unauthenticated reply names no workspace")
		require.Empty(t, r.IntegrationID, "an unauthenticated reply names no integration")
		ce.noReplyTo(t, id)
		require.Equal(t, before, badCounts(t, ce.Env), "%s wrote something", id)
	}

	// A forged signature: signed with another key.
	ev := command("cmd-forged", "listing.publish", acct.WorkspaceID, integID, data)
	refused("cmd-forged", map[string]any{"event": ev, "signature": sign("lki_not-the-secret", ev)})
	// The event changed after signing.
	ev2 := command("cmd-tampered", "listing.publish", acct.WorkspaceID, integID, data)
	refused("cmd-tampered", map[string]any{"event": strings.Replace(string(ev2), products[1], products[0], 1), "signature": sign(secret, ev2)})
	// Unsigned.
	ev = command("cmd-unsigned", "listing.publish", acct.WorkspaceID, integID, data)
	refused("cmd-unsigned", map[string]any{"event": ev})
	// A foreign workspace: correctly signed, but claiming another workspace.
	ev = command("cmd-foreign", "listing.publish", other.WorkspaceID, integID, data)
	refused("cmd-foreign", map[string]any{"event": ev, "signature": sign(secret, ev)})
	// An unknown integration.
	ev = command("cmd-unknown", "listing.publish", acct.WorkspaceID, uuid.NewString(), data)
	refused("cmd-unknown", map[string]any{"event": ev, "signature": sign(secret, ev)})

	// Bad messages from a live integration: answered with the endpoint's problem, nothing written.
	signed := func(id, typ string, data any) map[string]any {
		ev := command(id, typ, acct.WorkspaceID, integID, data)
		return map[string]any{"event": ev, "signature": sign(secret, ev)}
	}
	for _, c := range []struct {
		id, typ string
		data    any
		code    string
	}{
		{"cmd-type", "listing.drop_tables", map[string]any{}, "COMMAND_TYPE_UNKNOWN"},
		{"cmd-no-product", "listing.publish", map[string]any{"store_id": storeID}, "COMMAND_DATA_INVALID"},
		{"cmd-not-object", "listing.publish", []int{1}, "COMMAND_DATA_INVALID"},
		{"cmd-no-store", "listing.publish", map[string]any{"product_id": products[1]}, "VALIDATION_FAILED"},
		{"cmd-extra", "listing.publish", map[string]any{"product_id": products[1], "store_id": storeID, "x": 1}, "UNKNOWN_FIELD"},
		{"cmd-twice", "listing.publish", json.RawMessage(`{"product_id":"` + products[1] + `","store_id":"` + storeID + `","store_id":"` + storeID + `"}`), "UNKNOWN_FIELD"},
		{"cmd-case", "listing.publish", json.RawMessage(`{"product_id":"` + products[1] + `","store_id":"` + storeID + `","Store_id":"` + storeID + `"}`), "UNKNOWN_FIELD"},
		{"cmd-nested-twice", "listing.create_ai_task", json.RawMessage(`{"kind":"text","product_id":"` + products[1] + `","input":{"prompt":"a","prompt":"b"}}`), "UNKNOWN_FIELD"},
		{"cmd-missing-product", "listing.publish", map[string]any{"product_id": uuid.NewString(), "store_id": storeID}, "PRODUCT_NOT_FOUND"},
	} {
		ce.send(t, signed(c.id, c.typ, c.data))
		r := ce.repliesTo(t, c.id, 1)[0]
		require.Equal(t, c.code, problemCode(t, r), "%s: %s", c.id, r.Data)
		require.Equal(t, acct.WorkspaceID, r.WorkspaceID)
	}
	notJSON := ce.send(t, map[string]any{"event": "nope", "signature": "00"})
	require.Equal(t, "COMMAND_MALFORMED", problemCode(t, ce.repliesTo(t, notJSON, 1)[0]))
	noEvent := ce.send(t, map[string]any{"payload": "{}"})
	require.Equal(t, "COMMAND_MALFORMED", problemCode(t, ce.repliesTo(t, noEvent, 1)[0]))
	noType := ce.send(t, map[string]any{"event": `{"specversion":"1.0","id":"cmd-no-type","source":"/tests/erp"}`})
	require.Equal(t, "COMMAND_MALFORMED", problemCode(t, ce.repliesTo(t, noType, 1)[0]))
	ce.noReplyTo(t, "cmd-no-type")
	longID := ce.send(t, signed(strings.Repeat("x", 257), "listing.publish", data))
	require.Equal(t, "COMMAND_MALFORMED", problemCode(t, ce.repliesTo(t, longID, 1)[0]))
	huge := ce.send(t, signed("cmd-huge", "listing.publish", map[string]any{"product_id": products[1], "store_id": storeID,
		"padding": strings.Repeat("x", 2<<20)}))
	require.Equal(t, "COMMAND_TOO_LARGE", problemCode(t, ce.repliesTo(t, huge, 1)[0]))
	require.Equal(t, before, badCounts(t, ce.Env))

	// Revoked: the owner revokes; the same, correctly signed command is refused from then on.
	rev := ce.Do(servicetest.Request{Method: "DELETE", Path: ws + "/integrations/" + integID, Token: acct.AccessToken})
	require.Equal(t, http.StatusOK, rev.Status, "%s", rev.Body)
	before = badCounts(t, ce.Env)
	ev = command("cmd-revoked", "listing.publish", acct.WorkspaceID, integID, data)
	refused("cmd-revoked", map[string]any{"event": ev, "signature": sign(secret, ev)})
	require.Equal(t, integrationsBefore, ce.Count(`SELECT count(*) FROM integrations`))
	require.Zero(t, ce.Count(`SELECT count(*) FROM publications WHERE product_id = $1`, products[1]))

	// Nothing stays pending, and the outcomes are counted.
	require.Eventually(t, func() bool { return ce.pendingCount(t) == 0 }, 10*time.Second, 50*time.Millisecond)
	resp, err := http.Get(ce.URL + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	for _, line := range []string{
		`listing_command_messages_total{outcome="unauthenticated",type="listing.publish"} 6`,
		`listing_command_messages_total{outcome="malformed",type="unknown"} 5`,
		`listing_command_messages_total{outcome="rejected",type="unknown"} 1`,
		`listing_command_messages_total{outcome="rejected",type="listing.publish"} 7`,
		`listing_command_messages_total{outcome="rejected",type="listing.create_ai_task"} 1`,
	} {
		require.Contains(t, string(metrics), line)
	}
	require.NotContains(t, ce.Logs(), secret)
}

// Integration principals over HTTP: owners only, the secret shown once and never listed, no
// Idempotency-Key, a user of kind integration that cannot log in, revocation that keeps its
// first time.
func TestIntegrationPrincipals(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	acct := env.Register("owner-integrations@example.com")
	stranger := env.Register("stranger-integrations@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID

	resp := env.Do(servicetest.Request{Method: "POST", Path: ws + "/integrations", Token: acct.AccessToken, Header: idemKey(), Body: map[string]any{"name": "ERP"}})
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	require.Equal(t, "VALIDATION_FAILED", resp.Code())
	resp = env.Do(servicetest.Request{Method: "POST", Path: ws + "/integrations", Token: acct.AccessToken, Body: map[string]any{"name": " "}})
	require.Equal(t, http.StatusBadRequest, resp.Status, "%s", resp.Body)
	resp = env.Do(servicetest.Request{Method: "POST", Path: ws + "/integrations", Token: stranger.AccessToken, Body: map[string]any{"name": "ERP"}})
	require.Equal(t, http.StatusNotFound, resp.Status, "%s", resp.Body)
	require.Zero(t, env.Count(`SELECT count(*) FROM integrations`))
	require.Zero(t, env.Count(`SELECT count(*) FROM users WHERE kind = 'integration'`))

	// A member who is not an owner may not manage integrations.
	member := env.Register("member-integrations@example.com")
	_, err := env.DB.Owner.Exec(context.Background(), `INSERT INTO workspace_memberships (workspace_id, user_id, role) VALUES ($1, $2, 'member')`,
		acct.WorkspaceID, member.UserID)
	require.NoError(t, err)
	for _, req := range []servicetest.Request{
		{Method: "POST", Path: ws + "/integrations", Body: map[string]any{"name": "ERP"}},
		{Method: "GET", Path: ws + "/integrations"},
		{Method: "DELETE", Path: ws + "/integrations/" + uuid.NewString()},
	} {
		req.Token = member.AccessToken
		resp := env.Do(req)
		require.Equal(t, http.StatusForbidden, resp.Status, "%s %s: %s", req.Method, req.Path, resp.Body)
		require.Equal(t, "OWNER_REQUIRED", resp.Code())
	}
	require.Zero(t, env.Count(`SELECT count(*) FROM integrations`))

	resp = env.Do(servicetest.Request{Method: "POST", Path: ws + "/integrations", Token: acct.AccessToken, Body: map[string]any{"name": "ERP"}})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	m := resp.JSON(t)
	secret := m["secret"].(string)
	require.True(t, strings.HasPrefix(secret, "lki_") && len(secret) == 47, secret)
	integ := m["integration"].(map[string]any)
	id, userID := integ["id"].(string), integ["user_id"].(string)
	require.Equal(t, "ERP", integ["name"])
	require.Nil(t, integ["revoked_at"])
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM users WHERE id = $1 AND kind = 'integration' AND email IS NULL AND password_hash IS NULL`, userID))
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM workspace_memberships WHERE user_id = $1 AND workspace_id = $2 AND role = 'member'`, userID, acct.WorkspaceID))

	list := env.Do(servicetest.Request{Method: "GET", Path: ws + "/integrations", Token: acct.AccessToken})
	require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)
	require.NotContains(t, string(list.Body), secret)
	require.Len(t, list.JSON(t)["items"], 1)
	resp = env.Do(servicetest.Request{Method: "GET", Path: "/v1/workspaces/" + stranger.WorkspaceID + "/integrations", Token: stranger.AccessToken})
	require.Equal(t, http.StatusOK, resp.Status)
	require.Empty(t, resp.JSON(t)["items"], "another workspace's integrations are not listed")

	resp = env.Do(servicetest.Request{Method: "DELETE", Path: "/v1/workspaces/" + stranger.WorkspaceID + "/integrations/" + id, Token: stranger.AccessToken})
	require.Equal(t, http.StatusNotFound, resp.Status)
	require.Equal(t, "INTEGRATION_NOT_FOUND", resp.Code())
	resp = env.Do(servicetest.Request{Method: "DELETE", Path: ws + "/integrations/" + id, Token: acct.AccessToken})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	revokedAt := resp.JSON(t)["integration"].(map[string]any)["revoked_at"]
	require.NotNil(t, revokedAt)
	resp = env.Do(servicetest.Request{Method: "DELETE", Path: ws + "/integrations/" + id, Token: acct.AccessToken})
	require.Equal(t, http.StatusOK, resp.Status)
	require.Equal(t, revokedAt, resp.JSON(t)["integration"].(map[string]any)["revoked_at"])
	require.Zero(t, env.Count(`SELECT count(*) FROM workspace_memberships WHERE user_id = $1`, userID))

	require.NotContains(t, env.Logs(), secret)
}

// The Node.js example of docs/integrations.md (tests/bullmqnode/command-sender.mjs, a plain
// ioredis client) signs commands, sends them and reads their replies.
func TestCommandNodeSender(t *testing.T) {
	t.Parallel()
	requireEventsNode(t)
	ce := startCommands(t)
	acct, storeID, products, integID, secret := setupPublishing(t, ce, "cmd-node@example.com")
	ce.start()

	raw, err := json.Marshal(map[string]any{
		"prefix": strings.TrimSuffix(ce.stream, ":commands"), "source": "/erp/node", "workspaceId": acct.WorkspaceID,
		"integrationId": integID, "secret": secret,
		"commands": []map[string]any{
			{"id": "node-1", "type": "listing.publish", "data": map[string]any{"product_id": products[0], "store_id": storeID}},
			{"id": "node-2", "type": "listing.publish", "data": map[string]any{"product_id": products[0]}},
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "command-sender.mjs", string(raw))
	cmd.Dir = eventsNodeDir()
	cmd.Env = append(os.Environ(), "REDIS_URL="+ce.Config.RedisURL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node command-sender.mjs: %s", stderr.String())

	replies := map[string]struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}{}
	reason := ""
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			CorrelationID string          `json:"correlationid"`
			Type          string          `json:"type"`
			Data          json.RawMessage `json:"data"`
			Done          bool            `json:"done"`
			Reason        string          `json:"reason"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		if r.Done {
			reason = r.Reason
			continue
		}
		replies[r.CorrelationID] = struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}{r.Type, r.Data}
	}
	require.Equal(t, "replied", reason, "%s", out)
	require.Equal(t, "listing.command.accepted", replies["node-1"].Type, "%s", replies["node-1"].Data)
	require.Equal(t, "listing.command.rejected", replies["node-2"].Type)
	require.Contains(t, string(replies["node-2"].Data), `"VALIDATION_FAILED"`)
	require.Equal(t, 1, ce.Count(`SELECT count(*) FROM publications WHERE product_id = $1`, products[0]))
}

// A consumer that executed a command but could not write its reply (as if it crashed before
// acknowledging) leaves the entry pending; it is taken back after COMMANDS_CLAIM_IDLE and
// answered from the idempotency record: one publication, one accepted reply, counted as
// replayed.
func TestCommandExecutedButNotAcknowledgedIsReplayed(t *testing.T) {
	t.Parallel()
	ce := startCommands(t, func(c *config.Config) { c.CommandsClaimIdle = 300 * time.Millisecond })
	acct, storeID, products, integID, secret := setupPublishing(t, ce, "cmd-crash@example.com")
	ctx := context.Background()
	// The replies' key holds a string: every XADD to it fails after the command committed.
	require.NoError(t, ce.rdb.Set(ctx, ce.replies, "not a stream", 0).Err())
	ce.start()

	ev := command("cmd-crash-1", "listing.publish", acct.WorkspaceID, integID, map[string]any{"product_id": products[0], "store_id": storeID})
	ce.send(t, map[string]any{"event": ev, "signature": sign(secret, ev)})
	require.Eventually(t, func() bool {
		return ce.Count(`SELECT count(*) FROM publications WHERE product_id = $1`, products[0]) == 1
	}, 30*time.Second, 20*time.Millisecond, "the command executes")
	time.Sleep(time.Second) // a few failed replies and reclaims
	require.Equal(t, int64(1), ce.pendingCount(t), "not acknowledged without a reply")
	require.NoError(t, ce.rdb.Del(ctx, ce.replies).Err())

	reply := ce.repliesTo(t, "cmd-crash-1", 1)[0]
	require.Equal(t, "listing.command.accepted", reply.Type, "%s", reply.Data)
	require.Contains(t, string(reply.Data), products[0])
	require.Equal(t, 1, ce.Count(`SELECT count(*) FROM publications WHERE product_id = $1`, products[0]))
	require.Eventually(t, func() bool { return ce.pendingCount(t) == 0 }, 10*time.Second, 20*time.Millisecond)
	resp, err := http.Get(ce.URL + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(metrics), `listing_command_messages_total{outcome="replayed",type="listing.publish"} 1`)
	require.NotContains(t, string(metrics), `listing_command_messages_total{outcome="accepted",type="listing.publish"}`)
}

// Commands expire: a command without time, older than COMMANDS_MAX_AGE or more than 5
// minutes ahead is rejected COMMAND_EXPIRED and changes nothing; one that ran is answered
// from its idempotency record when delivered again after COMMANDS_MAX_AGE; once the record is
// gone (its retention passed), the same signed entry is rejected, never run again.
func TestCommandExpiry(t *testing.T) {
	t.Parallel()
	const maxAge = 3 * time.Second
	ce := startCommands(t, func(c *config.Config) { c.CommandsMaxAge = maxAge })
	acct, storeID, products, integID, secret := setupPublishing(t, ce, "cmd-expiry@example.com")
	ce.start()
	data := map[string]any{"product_id": products[0], "store_id": storeID}
	before := badCounts(t, ce.Env)
	for id, at := range map[string]time.Time{
		"cmd-old":    time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC),
		"cmd-notime": {},
		"cmd-ahead":  time.Now().Add(10 * time.Minute),
	} {
		ev := commandAt(at, id, "listing.publish", acct.WorkspaceID, integID, data)
		ce.send(t, map[string]any{"event": ev, "signature": sign(secret, ev)})
		r := ce.repliesTo(t, id, 1)[0]
		require.Equal(t, "COMMAND_EXPIRED", problemCode(t, r), "%s: %s", id, r.Data)
		require.Equal(t, integID, r.IntegrationID)
	}
	require.Equal(t, before, badCounts(t, ce.Env), "an expired command wrote something")
	require.Zero(t, ce.Count(`SELECT count(*) FROM publications WHERE product_id = $1`, products[0]))

	ev := command("cmd-once", "listing.publish", acct.WorkspaceID, integID, data)
	entry := map[string]any{"event": ev, "signature": sign(secret, ev)}
	ce.send(t, entry)
	require.Equal(t, "listing.command.accepted", ce.repliesTo(t, "cmd-once", 1)[0].Type)
	time.Sleep(maxAge + 500*time.Millisecond)
	ce.send(t, entry) // the same signed entry, now older than COMMANDS_MAX_AGE: its record answers
	replies := ce.repliesTo(t, "cmd-once", 2)
	require.Equal(t, "listing.command.accepted", replies[1].Type, "%s", replies[1].Data)
	require.JSONEq(t, string(replies[0].Data), string(replies[1].Data))

	// The record's retention passes (IDEMPOTENCY_RETENTION > COMMANDS_MAX_AGE + 5 min): the
	// entry replayed once more is rejected, and nothing runs again.
	_, err := ce.DB.Owner.Exec(context.Background(), `DELETE FROM idempotency_requests WHERE workspace_id = $1 AND method = 'MSG'`, acct.WorkspaceID)
	require.NoError(t, err)
	ce.send(t, entry)
	replies = ce.repliesTo(t, "cmd-once", 3)
	require.Equal(t, "COMMAND_EXPIRED", problemCode(t, replies[2]))
	require.Equal(t, 1, ce.Count(`SELECT count(*) FROM publications WHERE product_id = $1`, products[0]), "published once")
}
