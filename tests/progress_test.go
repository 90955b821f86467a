package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/internal/servicetest"
)

// TestProductSyncOperationShowsProgress: GET of a running product sync's operation shows how
// many products it synced so far; the finished operation keeps its last report.
func TestProductSyncOperationShowsProgress(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t)
	acct := env.Register("progress@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID
	storeID := seedVerifiedStore(t, env, acct, "shop-1")

	sb := env.Work.Externals.MarketplaceSandbox
	sb.Seed("sk_test_seed", 400) // eight pages of 50
	sb.SetLatency(300 * time.Millisecond)
	t.Cleanup(func() { sb.SetLatency(0) })

	sync := env.Do(servicetest.Request{Method: "POST", Path: ws + "/stores/" + storeID + "/product-syncs", Token: acct.AccessToken,
		Header: idemKey(), Body: map[string]any{}})
	require.Equal(t, http.StatusAccepted, sync.Status, "%s", sync.Body)
	opID := sync.JSON(t)["operation"].(map[string]any)["id"].(string)

	var running map[string]any
	require.Eventually(t, func() bool {
		got := env.Do(servicetest.Request{Method: "GET", Path: ws + "/operations/" + opID, Token: acct.AccessToken})
		o := got.JSON(t)["operation"].(map[string]any)
		if o["status"] == "running" && o["progress"] != nil {
			running = o
			return true
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "a running sync reports its progress")
	progress := running["progress"].(map[string]any)
	require.Positive(t, progress["done"].(float64))
	require.Less(t, progress["done"].(float64), 400.0)
	require.Contains(t, progress, "total")
	require.Nil(t, progress["total"], "the marketplace does not say how many products it holds")

	done := env.WaitOperation(acct, opID)
	require.Equal(t, "succeeded", done["status"], "%v", done)
	require.NotNil(t, done["progress"], "the last report stays")
}
