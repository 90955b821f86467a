package tests

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/internal/servicetest"
)

func idemKey() map[string]string { return map[string]string{"Idempotency-Key": uuid.NewString()} }

// TestStorePublishEndToEnd drives the first-publish flow: HTTP → outbox → dispatcher →
// BullMQ → worker → marketplace sandbox, and checks the platform holds one product.
func TestStorePublishEndToEnd(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t)
	acct := env.Register("flow@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID

	store := env.Do(servicetest.Request{Method: "POST", Path: ws + "/stores", Token: acct.AccessToken, Header: idemKey(),
		Body: map[string]any{"platform": "sandbox", "shop_id": "shop-1", "name": "Shop", "credentials": map[string]string{"api_key": "sk_test_flow"}}})
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	op := env.WaitOperation(acct, store.JSON(t)["operation"].(map[string]any)["id"].(string))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	storeID := store.JSON(t)["store"].(map[string]any)["id"].(string)

	product := env.Do(servicetest.Request{Method: "POST", Path: ws + "/products", Token: acct.AccessToken,
		Body: map[string]any{"title": "Mug", "price": "9.90", "currency": "EUR"}})
	productID := product.JSON(t)["product"].(map[string]any)["id"].(string)

	pub := env.Do(servicetest.Request{Method: "POST", Path: ws + "/products/" + productID + "/publications", Token: acct.AccessToken,
		Header: idemKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	op = env.WaitOperation(acct, pub.JSON(t)["operation"].(map[string]any)["id"].(string))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	pubID := pub.JSON(t)["publication"].(map[string]any)["id"].(string)
	require.Equal(t, 1, env.Work.Externals.MarketplaceSandbox.ProductsWithRef(pubID))
}
