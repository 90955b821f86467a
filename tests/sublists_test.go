package tests

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/internal/servicetest"
)

// TestSubResourcesAreListedUnderTheirParent: what a POST creates under a path is listed by a
// GET of that path — a store's product syncs and verifications, a product's publications —
// newest first, paginated, only the parent's own, and 404 for a parent the workspace does not
// have.
func TestSubResourcesAreListedUnderTheirParent(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t)
	acct := env.Register("lists@example.com")
	other := env.Register("lists-other@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID
	do := func(method, path string, body any, key bool) servicetest.Response {
		t.Helper()
		req := servicetest.Request{Method: method, Path: path, Token: acct.AccessToken, Body: body}
		if key {
			req.Header = idemKey()
		}
		return env.Do(req)
	}
	wait := func(resp servicetest.Response, status int) map[string]any {
		t.Helper()
		require.Equal(t, status, resp.Status, "%s", resp.Body)
		op := env.WaitOperation(acct, resp.JSON(t)["operation"].(map[string]any)["id"].(string))
		require.Equal(t, "succeeded", op["status"], "%v", op)
		return resp.JSON(t)
	}
	newStore := func(shop string) string {
		m := wait(do("POST", ws+"/stores", map[string]any{"platform": "sandbox", "shop_id": shop, "name": shop,
			"credentials": map[string]string{"api_key": "sk_test_" + shop}}, true), http.StatusCreated)
		return m["store"].(map[string]any)["id"].(string)
	}
	storeA, storeB := newStore("shop-a"), newStore("shop-b")
	wait(do("POST", ws+"/stores/"+storeA+"/verifications", map[string]any{}, true), http.StatusAccepted)
	syncA := wait(do("POST", ws+"/stores/"+storeA+"/product-syncs", map[string]any{}, true), http.StatusAccepted)["sync"].(map[string]any)["id"]
	wait(do("POST", ws+"/stores/"+storeB+"/product-syncs", map[string]any{}, true), http.StatusAccepted)

	product := func() string {
		resp := do("POST", ws+"/products", map[string]any{"title": "Mug", "price": "9.90", "currency": "EUR"}, false)
		require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
		require.Contains(t, string(resp.Body), `"images":[]`, "a list is [], never null")
		return resp.JSON(t)["product"].(map[string]any)["id"].(string)
	}
	published, unpublished := product(), product()
	pubA := wait(do("POST", ws+"/products/"+published+"/publications", map[string]any{"store_id": storeA}, true),
		http.StatusAccepted)["publication"].(map[string]any)["id"]
	pubB := wait(do("POST", ws+"/products/"+published+"/publications", map[string]any{"store_id": storeB}, true),
		http.StatusAccepted)["publication"].(map[string]any)["id"]

	list := func(path string) ([]map[string]any, any) {
		t.Helper()
		resp := do("GET", ws+path, nil, false)
		require.Equal(t, http.StatusOK, resp.Status, "%s: %s", path, resp.Body)
		m := resp.JSON(t)
		raw, ok := m["items"].([]any)
		require.True(t, ok, "%s: items is a list, also when empty: %s", path, resp.Body)
		items := make([]map[string]any, len(raw))
		for i, v := range raw {
			items[i] = v.(map[string]any)
		}
		return items, m["next_cursor"]
	}

	syncs, _ := list("/stores/" + storeA + "/product-syncs")
	require.Len(t, syncs, 1, "only store A's sync")
	require.Equal(t, syncA, syncs[0]["id"])
	require.Equal(t, "succeeded", syncs[0]["status"])

	verifs, _ := list("/stores/" + storeA + "/verifications")
	require.Len(t, verifs, 2, "the creation's verification and the one asked again")
	for _, v := range verifs {
		require.Equal(t, storeA, v["store_id"])
		require.Equal(t, "succeeded", v["status"])
		require.Equal(t, true, v["valid"])
	}
	require.GreaterOrEqual(t, verifs[0]["created_at"], verifs[1]["created_at"], "newest first")
	page, cursor := list("/stores/" + storeA + "/verifications?limit=1")
	require.Len(t, page, 1)
	require.NotNil(t, cursor)
	page2, cursor2 := list("/stores/" + storeA + "/verifications?limit=1&cursor=" + cursor.(string))
	require.Len(t, page2, 1)
	require.Nil(t, cursor2)
	require.Equal(t, verifs[1]["id"], page2[0]["id"])

	pubs, _ := list("/products/" + published + "/publications")
	ids := []any{}
	for _, p := range pubs {
		require.Equal(t, published, p["product_id"])
		ids = append(ids, p["id"])
	}
	require.ElementsMatch(t, []any{pubA, pubB}, ids)
	none, _ := list("/products/" + unpublished + "/publications")
	require.Empty(t, none)

	// A parent the workspace does not have: unknown, malformed, or another workspace's.
	otherStore := env.Do(servicetest.Request{Method: "POST", Path: "/v1/workspaces/" + other.WorkspaceID + "/stores",
		Token: other.AccessToken, Header: idemKey(), Body: map[string]any{"platform": "sandbox", "shop_id": "o", "name": "o",
			"credentials": map[string]string{"api_key": "sk_test_o"}}})
	require.Equal(t, http.StatusCreated, otherStore.Status, "%s", otherStore.Body)
	otherStoreID := otherStore.JSON(t)["store"].(map[string]any)["id"].(string)
	for path, code := range map[string]string{
		"/stores/" + uuid.NewString() + "/product-syncs":  "STORE_NOT_FOUND",
		"/stores/not-an-id/verifications":                 "STORE_NOT_FOUND",
		"/stores/" + otherStoreID + "/product-syncs":      "STORE_NOT_FOUND",
		"/stores/" + otherStoreID + "/verifications":      "STORE_NOT_FOUND",
		"/products/" + uuid.NewString() + "/publications": "PRODUCT_NOT_FOUND",
	} {
		resp := do("GET", ws+path, nil, false)
		require.Equal(t, http.StatusNotFound, resp.Status, "%s: %s", path, resp.Body)
		require.Equal(t, code, resp.Code(), path)
	}
	resp := do("GET", ws+"/stores/"+storeA+"/product-syncs?limit=0", nil, false)
	require.Equal(t, http.StatusBadRequest, resp.Status)
}
