package tests

// QUEUE_TRANSPORT=memory: the whole service in one process with PostgreSQL only. Redis is
// pointed at a closed port in every test here, so anything that still needed it would fail.

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/servicetest"
)

// closedRedis is a Redis URL nothing listens on.
const closedRedis = "redis://127.0.0.1:1/0?dial_timeout=200ms"

// TestMemoryTransportRunsTheFlowsWithoutRedis: store verification, first publication and an
// AI task succeed with the in-process queues, and /readyz does not ask Redis.
func TestMemoryTransportRunsTheFlowsWithoutRedis(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t, func(c *config.Config) {
		c.QueueTransport, c.RedisURL = config.TransportMemory, closedRedis
	})
	ready := env.Do(servicetest.Request{Method: "GET", Path: "/readyz"})
	require.Equal(t, http.StatusOK, ready.Status, "%s", ready.Body)
	require.NotContains(t, string(ready.Body), "redis")

	acct := env.Register("memory@example.com")
	storeID := seedVerifiedStore(t, env, acct, "memory")
	productID := seedProduct(t, env, acct)
	pub := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products/" + productID + "/publications",
		Token: acct.AccessToken, Header: seedKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	op := env.WaitOperation(acct, seedField(t, pub, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	require.Equal(t, 1, env.Work.Externals.MarketplaceSandbox.ProductsWithRef(seedField(t, pub, "publication", "id")))

	ai := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/ai-tasks", Token: acct.AccessToken,
		Header: seedKey(), Body: map[string]any{"kind": "text", "product_id": productID, "input": map[string]any{"prompt": "a short description"}}})
	require.Equal(t, http.StatusAccepted, ai.Status, "%s", ai.Body)
	op = env.WaitOperation(acct, seedField(t, ai, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
}

// TestMemoryTransportRetriesThroughTheOutbox: a job that fails and is retried goes back to
// the outbox (pending, with its next attempt in the row's metadata) and succeeds on the
// next delivery.
func TestMemoryTransportRetriesThroughTheOutbox(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t, func(c *config.Config) {
		c.QueueTransport, c.RedisURL = config.TransportMemory, closedRedis
	})
	acct := env.Register("memory-retry@example.com")
	storeID := seedVerifiedStore(t, env, acct, "memory-retry")
	productID := seedProduct(t, env, acct)
	env.Work.Externals.MarketplaceSandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointCreateProduct, Status: 500})
	pub := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products/" + productID + "/publications",
		Token: acct.AccessToken, Header: seedKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	op := env.WaitOperation(acct, seedField(t, pub, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	pubID := seedField(t, pub, "publication", "id")
	require.Equal(t, "2", seedOne(t, env.DB, "SELECT attempts::text FROM publications WHERE id = $1", pubID))
	require.Equal(t, "2", seedOne(t, env.DB, `SELECT metadata->>'job_attempt' FROM outbox_all_events
		WHERE event_type = 'publication.requested' AND event_payload->>'publication_id' = $1`, pubID))
}

// TestMemoryTransportSurvivesKill: `app all` with the memory transport is SIGKILLed while a
// store's verification job runs (the outbox row is claimed, the handler waits for the
// marketplace); restarted, it delivers the event again and the operation succeeds.
func TestMemoryTransportSurvivesKill(t *testing.T) {
	t.Parallel()
	front, url := newHeldFront(t, 0, false)
	front.holdVerify.Store(true)
	db := pgtest.New(t)
	addr := seedFreeAddr(t)
	base := "http://" + addr
	env := map[string]string{
		"QUEUE_TRANSPORT":      "memory",
		"REDIS_URL":            closedRedis,
		"MIGRATE_DATABASE_URL": db.OwnerURL,
		"HTTP_ADDR":            addr,
		"PUBLIC_BASE_URL":      base,
		"PLATFORM_BASE_URL":    url,
		"SANDBOX_AI_ADDR":      seedFreeAddr(t),
	}
	start := func() *seedProc {
		p := seedStartProc(t, "all", seedEnv(db.AppURL, seedPrefix(), env), "all")
		seedWaitHTTP(t, p, base+"/readyz")
		return p
	}
	first := start()
	client := seedChildEnv(t, db, base)
	acct := client.Register("memory-kill@example.com")
	store := client.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/stores", Token: acct.AccessToken,
		Header: seedKey(), Body: seedStoreBody("memory-kill")})
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	opID := seedField(t, store, "operation", "id")
	front.waitHeld(t)
	first.kill(t)
	require.Equal(t, "dispatching", seedOne(t, db, `SELECT status FROM outbox_all_events WHERE destination = 'store-verification'`),
		"the event was handed to the killed process and not marked")

	// The killed process's lease runs out (time travel: OUTBOX_LEASE saved).
	_, err := db.Owner.Exec(context.Background(), `UPDATE outbox_events SET locked_until = now() WHERE locked_by IS NOT NULL`)
	require.NoError(t, err)
	front.holdVerify.Store(false)
	since := time.Now()
	start()
	seedWaitStatus(t, db, "succeeded", "SELECT status FROM operations WHERE id = $1", opID)
	t.Logf("operation succeeded %s after the restart", time.Since(since).Round(time.Millisecond))
	require.Equal(t, "verified", seedOne(t, db, "SELECT status FROM stores WHERE workspace_id = $1", acct.WorkspaceID))
}

// TestMemoryTransportHoldsTheEventThroughALongCall: with the memory transport a job holds its
// outbox event for a lease of its own (JOB_LOCK_DURATION from when it is taken), not the
// dispatcher's OUTBOX_LEASE: an AI call longer than OUTBOX_LEASE (13 s against 11 s, well
// within AI_TIMEOUT) is made once, is not cut short, and its task succeeds. Before, the
// handler ran within OUTBOX_LEASE/2 (the call was cut at 5.5 s and handed back as the same
// attempt at once, again and again); without the lease of its own the event would be claimed
// and delivered again while the first call ran.
func TestMemoryTransportHoldsTheEventThroughALongCall(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t, func(c *config.Config) {
		c.QueueTransport, c.RedisURL = config.TransportMemory, closedRedis
		c.OutboxLease = 11 * time.Second // the dispatcher's publish time-out is 10 s
	})
	acct := env.Register("memory-long@example.com")
	productID := seedProduct(t, env, acct)
	sb := env.Work.Externals.AISandbox
	sb.SetLatency(13 * time.Second)
	ai := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/ai-tasks", Token: acct.AccessToken,
		Header: seedKey(), Body: map[string]any{"kind": "text", "product_id": productID, "input": map[string]any{"prompt": "slow"}}})
	require.Equal(t, http.StatusAccepted, ai.Status, "%s", ai.Body)
	op := env.WaitOperation(acct, seedField(t, ai, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	require.Equal(t, 1, sb.Calls(aiprovider.EndpointChat), "one provider call")
	require.Equal(t, "", seedOne(t, env.DB, `SELECT coalesce(metadata->>'job_attempt', '') FROM outbox_all_events
		WHERE event_type = 'ai_task.requested'`), "delivered once: never handed back")
}

// TestMemoryTransportRecordGivesUpAfterTheAICall: over the memory transport, the record step
// of an AI task gives up after the provider answered (every record transaction fails until
// the result is held): the result is held on the task and the next delivery records it, on
// the job's last attempt too (handed back once, not left to the reconciler). One provider
// call. TestEdgesRecordGivesUpAfterTheAICall is BullMQ's twin.
func TestMemoryTransportRecordGivesUpAfterTheAICall(t *testing.T) {
	t.Parallel()
	for _, attempts := range []int{3, 1} {
		t.Run("attempts_"+strconv.Itoa(attempts), func(t *testing.T) {
			t.Parallel()
			env := servicetest.StartAll(t, func(c *config.Config) {
				c.QueueTransport, c.RedisURL, c.JobAttempts = config.TransportMemory, closedRedis, attempts
			})
			failed := failRecordsUntilHeld(t, env.DB, "ai_tasks")
			acct := env.Register("memory-held@example.com")
			productID := seedProduct(t, env, acct)
			task := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/ai-tasks", Token: acct.AccessToken,
				Header: seedKey(), Body: map[string]any{"kind": "text", "product_id": productID, "input": map[string]any{"prompt": "held"}}})
			require.Equal(t, http.StatusAccepted, task.Status, "%s", task.Body)
			op := env.WaitOperation(acct, seedField(t, task, "operation", "id"))
			require.Equal(t, "succeeded", op["status"], "%v", op)
			require.GreaterOrEqual(t, failed(), worker.RecordRetries+1, "the first delivery's record step gave up")
			require.Equal(t, 1, env.Work.Externals.AISandbox.Calls(aiprovider.EndpointChat), "one provider call")
			taskID := seedField(t, task, "ai_task", "id")
			require.Equal(t, "1", seedOne(t, env.DB, "SELECT attempts::text FROM ai_tasks WHERE id = $1", taskID),
				"the held result is recorded without a second run")
		})
	}
}
