package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/servicetest"
)

// marketplaceCalls counts the sandbox marketplace's calls other than verifications.
func marketplaceCalls(env *servicetest.Env) int {
	n := 0
	for endpoint, c := range env.Work.Externals.MarketplaceSandbox.Stats().Calls {
		if endpoint != marketplace.EndpointVerify {
			n += c
		}
	}
	return n
}

// TestCancelHeldBacklog: a workspace's backlog of publications, one admitted (waiting for its
// store's budget) and the rest held back by fair share, is cancelled one by one: every
// operation and publication ends cancelled, announced like any finish, nothing stays in the
// outbox or holds a fair-share slot, and the worker that takes the admitted job afterwards
// calls nothing (counted at the sandbox). A finished operation is refused, and a running
// one is not stopped: it finishes as it would.
func TestCancelHeldBacklog(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t, func(c *config.Config) {
		c.FairShareSlots = "1"
		// A publish takes 2 tokens: the first takes the burst, the next waits 10 s.
		c.StoreRateLimits = config.RateLimits{"sandbox": domain.RateLimit{PerSecond: 0.2, Burst: 2}}
	})
	acct := env.Register("cancel@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID
	do := func(method, path string, body any, header map[string]string) servicetest.Response {
		return env.Do(servicetest.Request{Method: method, Path: ws + path, Token: acct.AccessToken, Header: header, Body: body})
	}
	store := do("POST", "/stores", map[string]any{"platform": "sandbox", "shop_id": "shop-c", "name": "Shop",
		"credentials": map[string]string{"api_key": "sk_test_cancel"}}, idemKey())
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	require.Equal(t, "succeeded", env.WaitOperation(acct, store.JSON(t)["operation"].(map[string]any)["id"].(string))["status"])
	storeID := store.JSON(t)["store"].(map[string]any)["id"].(string)
	publish := func() (pubID, opID string) {
		p := do("POST", "/products", map[string]any{"title": "Mug", "price": "9.90", "currency": "EUR"}, nil)
		require.Equal(t, http.StatusCreated, p.Status, "%s", p.Body)
		pub := do("POST", "/products/"+p.JSON(t)["product"].(map[string]any)["id"].(string)+"/publications",
			map[string]any{"store_id": storeID}, idemKey())
		require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
		return pub.JSON(t)["publication"].(map[string]any)["id"].(string), pub.JSON(t)["operation"].(map[string]any)["id"].(string)
	}

	_, firstOp := publish()
	require.Equal(t, "succeeded", env.WaitOperation(acct, firstOp)["status"])
	before := marketplaceCalls(env)

	const backlog = 8
	var pubs, ops []string
	for range backlog {
		p, o := publish()
		pubs, ops = append(pubs, p), append(ops, o)
	}
	heldSQL := `SELECT count(*) FROM outbox_events WHERE workspace_id = $1 AND status = 'held'`
	require.Eventually(t, func() bool { return env.Count(heldSQL, acct.WorkspaceID) == backlog-1 }, 10*time.Second, 20*time.Millisecond,
		"one publication admitted (waiting for the store's budget), the others held")

	for _, op := range ops {
		resp := do("POST", "/operations/"+op+"/cancel", nil, nil)
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
		require.Equal(t, "cancelled", resp.JSON(t)["operation"].(map[string]any)["status"])
	}
	for i, op := range ops {
		got := env.WaitOperation(acct, op)
		require.Equal(t, "cancelled", got["status"])
		require.Nil(t, got["error"])
		pub := do("GET", "/publications/"+pubs[i], nil, nil)
		require.Equal(t, "cancelled", pub.JSON(t)["publication"].(map[string]any)["status"], "%s", pub.Body)
	}
	again := do("POST", "/operations/"+ops[0]+"/cancel", nil, nil)
	require.Equal(t, http.StatusConflict, again.Status, "%s", again.Body)
	require.Equal(t, domain.ErrOperationFinished.Code, again.Code())
	finished := do("POST", "/operations/"+firstOp+"/cancel", nil, nil)
	require.Equal(t, http.StatusConflict, finished.Status, "%s", finished.Body)
	require.Equal(t, domain.ErrOperationFinished.Code, finished.Code())

	require.Zero(t, env.Count(heldSQL, acct.WorkspaceID), "the held events left with their tasks")
	require.Zero(t, env.Count(`SELECT count(*) FROM outbox_fair_slots WHERE workspace_id = $1`, acct.WorkspaceID),
		"no slot stays taken by a cancelled task")
	require.Equal(t, backlog, env.Count(`SELECT count(*) FROM outbox_all_events WHERE workspace_id = $1
		AND event_type = 'operation.status_changed' AND event_payload ->> 'status' = 'cancelled'`, acct.WorkspaceID),
		"each cancellation announced, as any finish")

	// The admitted job comes back once its wait is over: its worker finds the task finished.
	require.Eventually(t, func() bool {
		return strings.Count(env.Logs(), `"outcome":"skipped"`) >= 1
	}, 20*time.Second, 50*time.Millisecond, "the admitted job was taken again and skipped")
	require.Equal(t, before, marketplaceCalls(env), "no call to the marketplace for a cancelled task")
	for _, p := range pubs {
		require.Zero(t, env.Work.Externals.MarketplaceSandbox.ProductsWithRef(p))
	}

	// A running task is not stopped.
	env.Work.Externals.MarketplaceSandbox.SetLatency(2 * time.Second)
	_, runningOp := publish()
	require.Eventually(t, func() bool {
		return do("GET", "/operations/"+runningOp, nil, nil).JSON(t)["operation"].(map[string]any)["status"] == "running"
	}, 15*time.Second, 20*time.Millisecond)
	running := do("POST", "/operations/"+runningOp+"/cancel", nil, nil)
	require.Equal(t, http.StatusConflict, running.Status, "%s", running.Body)
	require.Equal(t, domain.ErrTaskStarted.Code, running.Code())
	require.Equal(t, "succeeded", env.WaitOperation(acct, runningOp)["status"])
}
