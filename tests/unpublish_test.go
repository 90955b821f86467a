package tests

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/servicetest"
)

// An unpublish over the memory transport: see unpublishScenario.
func TestUnpublishOverTheMemoryTransport(t *testing.T) {
	t.Parallel()
	unpublishScenario(t, servicetest.StartAll(t, func(c *config.Config) {
		c.QueueTransport, c.RedisURL = config.TransportMemory, closedRedis
	}))
}

// An unpublish over BullMQ: see unpublishScenario.
func TestUnpublishOverBullMQ(t *testing.T) {
	t.Parallel()
	unpublishScenario(t, servicetest.StartAll(t))
}

// unpublishScenario: the first DELETE deletes the product but is answered 500, the retry
// gets 404 and counts as done (one product deleted, the operation succeeded); a replay of
// the key starts nothing; from acceptance on, updates and a second unpublish are refused;
// the publication stays succeeded and shows unpublished; republishing creates a new
// publication and a new product; an update racing an unpublish is refused or runs before it.
func unpublishScenario(t *testing.T, env *servicetest.Env) {
	sb := env.Work.Externals.MarketplaceSandbox
	acct := env.Register("unpublish@example.com")
	ws := seedWS(acct)
	storeID := seedVerifiedStore(t, env, acct, "unpublish")
	productID := seedProduct(t, env, acct)
	do := func(method, path string, header map[string]string, body any) servicetest.Response {
		return env.Do(servicetest.Request{Method: method, Path: ws + path, Token: acct.AccessToken, Header: header, Body: body})
	}
	publish := func() (string, string) {
		pub := do("POST", "/products/"+productID+"/publications", seedKey(), map[string]any{"store_id": storeID})
		require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
		require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, pub, "operation", "id"))["status"])
		id := seedField(t, pub, "publication", "id")
		return id, seedField(t, do("GET", "/publications/"+id, nil, nil), "publication", "external_product_id")
	}
	pubID, externalID := publish()

	sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointDeleteProduct, Status: 500, AfterEffect: true})
	key := seedKey()
	un := do("POST", "/publications/"+pubID+"/unpublish", key, map[string]any{})
	require.Equal(t, http.StatusAccepted, un.Status, "%s", un.Body)
	replay := do("POST", "/publications/"+pubID+"/unpublish", key, map[string]any{})
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(un.Body), string(replay.Body))
	badProblem(t, do("POST", "/publications/"+pubID+"/updates", seedKey(), map[string]any{}), http.StatusConflict, "PUBLICATION_UNPUBLISHED")
	badProblem(t, do("POST", "/publications/"+pubID+"/unpublish", seedKey(), map[string]any{}), http.StatusConflict, "PUBLICATION_UNPUBLISHED")
	if again := do("POST", "/products/"+productID+"/publications", seedKey(), map[string]any{"store_id": storeID}); again.Status != http.StatusAccepted {
		badProblem(t, again, http.StatusConflict, "PRODUCT_ALREADY_PUBLISHED") // else the unpublish had succeeded already
		env.WaitOperation(acct, seedField(t, un, "operation", "id"))
	} else {
		env.WaitOperation(acct, seedField(t, again, "operation", "id"))
	}

	op := env.WaitOperation(acct, seedField(t, un, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	require.Equal(t, 2, sb.Calls(marketplace.EndpointDeleteProduct), "the DELETE answered 500, then its repeat's 404")
	require.Equal(t, 1, sb.Stats().ProductsDeleted)
	_, exists := sb.Product("sk_test_seed", externalID)
	require.False(t, exists)
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM unpublishes`))
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM outbox_all_events WHERE event_type = 'publication.unpublished'`))
	got := do("GET", "/publications/"+pubID, nil, nil).JSON(t)["publication"].(map[string]any)
	require.Equal(t, "succeeded", got["status"])
	require.Equal(t, true, got["unpublished"])
	require.NotEmpty(t, got["unpublished_at"])
	list := do("GET", "/publications/"+pubID+"/unpublishes", nil, nil)
	require.Len(t, list.JSON(t)["items"], 1, "%s", list.Body)
	one := do("GET", "/publications/"+pubID+"/unpublishes/"+seedField(t, un, "unpublish", "id"), nil, nil)
	require.Equal(t, "succeeded", seedField(t, one, "unpublish", "status"))
	badProblem(t, do("GET", "/publications/"+pubID+"/unpublishes/"+productID, nil, nil), http.StatusNotFound, "UNPUBLISH_NOT_FOUND")

	// Republished: a new publication and a new platform product (unless the check above
	// republished already).
	var pub2, external2 string
	if env.Count(`SELECT count(*) FROM publications WHERE unpublished_at IS NULL AND status = 'succeeded'`) == 0 {
		pub2, external2 = publish()
	} else {
		require.NoError(t, env.DB.Owner.QueryRow(t.Context(), `SELECT id::text, external_product_id FROM publications WHERE unpublished_at IS NULL`).Scan(&pub2, &external2))
	}
	require.NotEqual(t, pubID, pub2)
	require.NotEqual(t, externalID, external2)

	// An update racing an unpublish: refused, or accepted first (the push claim orders them).
	var update, unpub servicetest.Response
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		update = do("POST", "/publications/"+pub2+"/updates", seedKey(), map[string]any{})
	}()
	go func() {
		defer wg.Done()
		unpub = do("POST", "/publications/"+pub2+"/unpublish", seedKey(), map[string]any{})
	}()
	wg.Wait()
	require.Equal(t, http.StatusAccepted, unpub.Status, "%s", unpub.Body)
	if update.Status == http.StatusAccepted {
		env.WaitOperation(acct, seedField(t, update, "operation", "id"))
	} else {
		badProblem(t, update, http.StatusConflict, "PUBLICATION_UNPUBLISHED")
	}
	require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, unpub, "operation", "id"))["status"])
	_, exists = sb.Product("sk_test_seed", external2)
	require.False(t, exists)
}
