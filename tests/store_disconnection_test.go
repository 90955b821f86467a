package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/servicetest"
)

// A store disconnection (DELETE …/stores/{id}) is refused STORE_BUSY while a task of the
// store runs; once accepted it revokes the key at the marketplace and the store is
// disconnected (credentials erased, disconnected_at); publish, product sync, listing update,
// unpublish and a second disconnection are then refused STORE_DISCONNECTED, none of them
// edited for it (the guard "store connected"); replacing the authorization reconnects it.
func TestStoreDisconnection(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t, func(c *config.Config) {
		c.QueueTransport, c.RedisURL = config.TransportMemory, closedRedis
	})
	sb := env.Work.Externals.MarketplaceSandbox
	acct := env.Register("store-disconnection@example.com")
	ws := seedWS(acct)
	storeID := seedVerifiedStore(t, env, acct, "disconnect")
	productID := seedProduct(t, env, acct)
	do := func(method, path string, body any) servicetest.Response {
		return env.Do(servicetest.Request{Method: method, Path: ws + path, Token: acct.AccessToken, Header: seedKey(), Body: body})
	}
	pub := do("POST", "/products/"+productID+"/publications", map[string]any{"store_id": storeID})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, pub, "operation", "id"))["status"])
	pubID := seedField(t, pub, "publication", "id")

	// A sync held by the marketplace's Retry-After: the disconnection waits for none.
	sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointListProducts, Status: http.StatusTooManyRequests, RetryAfter: 3 * time.Second})
	sync := do("POST", "/stores/"+storeID+"/product-syncs", map[string]any{})
	require.Equal(t, http.StatusAccepted, sync.Status, "%s", sync.Body)
	require.Eventually(t, func() bool { return sb.Calls(marketplace.EndpointListProducts) >= 1 }, 30*time.Second, 10*time.Millisecond)
	badProblem(t, do("DELETE", "/stores/"+storeID, nil), http.StatusConflict, "STORE_BUSY")
	require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, sync, "operation", "id"))["status"])

	dc := do("DELETE", "/stores/"+storeID, nil)
	require.Equal(t, http.StatusAccepted, dc.Status, "%s", dc.Body)
	require.Equal(t, storeID, seedField(t, dc, "store_disconnection", "store_id"))
	require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, dc, "operation", "id"))["status"])
	require.Equal(t, 1, sb.Calls(marketplace.EndpointRevoke))
	store := do("GET", "/stores/"+storeID, nil)
	require.Equal(t, "disconnected", seedField(t, store, "store", "status"))
	require.NotEmpty(t, seedField(t, store, "store", "disconnected_at"))
	var sealed int
	require.NoError(t, env.DB.Owner.QueryRow(t.Context(), `SELECT length(credentials_sealed) FROM stores WHERE id = $1`, storeID).Scan(&sealed))
	require.Zero(t, sealed, "the credentials are erased")
	list := do("GET", "/stores/"+storeID+"/disconnections", nil)
	require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)

	empty := map[string]any{}
	for _, r := range []struct {
		method, path string
		body         any
	}{{"POST", "/products/" + productID + "/publications", map[string]any{"store_id": storeID}},
		{"POST", "/stores/" + storeID + "/product-syncs", empty}, {"POST", "/publications/" + pubID + "/updates", empty},
		{"POST", "/publications/" + pubID + "/unpublish", empty}, {"DELETE", "/stores/" + storeID, nil}} {
		badProblem(t, do(r.method, r.path, r.body), http.StatusConflict, "STORE_DISCONNECTED")
	}

	re := env.Do(servicetest.Request{Method: "PUT", Path: ws + "/stores/" + storeID + "/authorization", Token: acct.AccessToken,
		Header: seedKey(), Body: map[string]any{"credentials": map[string]string{"api_key": "sk_test_reconnected"}}})
	require.Less(t, re.Status, 300, "%s", re.Body)
	require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, re, "operation", "id"))["status"])
	store = do("GET", "/stores/"+storeID, nil)
	require.Equal(t, "verified", seedField(t, store, "store", "status"))
	sync = do("POST", "/stores/"+storeID+"/product-syncs", map[string]any{})
	require.Equal(t, http.StatusAccepted, sync.Status, "%s", sync.Body)
}
