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

// TestListingUpdateOutOfOrderOverTheMemoryTransport (issue 12, "Done when"): two draft
// saves and two update requests, delivered out of order, leave the platform with the latest
// revision; a replayed update request is a no-op. The whole service runs in this process
// with the memory transport and Redis on a closed port.
//
// Out of order: revision 2's PUT is refused with 429 and Retry-After, so its job is snoozed
// (back through the outbox) and delivered again only after revision 3's update was pushed.
func TestListingUpdateOutOfOrderOverTheMemoryTransport(t *testing.T) {
	t.Parallel()
	env := servicetest.StartAll(t, func(c *config.Config) {
		c.QueueTransport, c.RedisURL = config.TransportMemory, closedRedis
	})
	sb := env.Work.Externals.MarketplaceSandbox
	acct := env.Register("listing-update@example.com")
	ws := seedWS(acct)
	storeID := seedVerifiedStore(t, env, acct, "listing-update")
	productID := seedProduct(t, env, acct)

	// Publishing is what makes a listing updatable.
	pub := env.Do(servicetest.Request{Method: "POST", Path: ws + "/products/" + productID + "/publications",
		Token: acct.AccessToken, Header: seedKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	pubID := seedField(t, pub, "publication", "id")
	updates := ws + "/publications/" + pubID + "/updates"
	early := env.Do(servicetest.Request{Method: "POST", Path: updates, Token: acct.AccessToken, Header: seedKey(), Body: map[string]any{}})
	if early.Status != http.StatusAccepted { // the publish may have finished already
		badProblem(t, early, http.StatusConflict, "PUBLICATION_NOT_PUBLISHED")
	}
	require.Equal(t, "succeeded", env.WaitOperation(acct, seedField(t, pub, "operation", "id"))["status"])
	got := env.Do(servicetest.Request{Method: "GET", Path: ws + "/publications/" + pubID, Token: acct.AccessToken})
	externalID := seedField(t, got, "publication", "external_product_id")
	title := func() string {
		p, ok := sb.Product("sk_test_seed", externalID)
		require.True(t, ok)
		return p.Title
	}
	if early.Status == http.StatusAccepted {
		env.WaitOperation(acct, seedField(t, early, "operation", "id"))
	}
	putsBefore := sb.Calls(marketplace.EndpointUpdateProduct)

	saveDraft := func(revision, newTitle string) {
		resp := env.Do(servicetest.Request{Method: "PUT", Path: ws + "/products/" + productID + "/draft", Token: acct.AccessToken,
			Header: map[string]string{"If-Match": `"` + revision + `"`},
			Body:   map[string]any{"title": newTitle, "description": "A mug", "price": "9.90", "currency": "EUR"}})
		require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	}
	request := func(key map[string]string) servicetest.Response {
		resp := env.Do(servicetest.Request{Method: "POST", Path: updates, Token: acct.AccessToken, Header: key, Body: map[string]any{}})
		require.Equal(t, http.StatusAccepted, resp.Status, "%s", resp.Body)
		return resp
	}

	// Revision 2: its PUT is refused once with Retry-After, so its job waits.
	saveDraft("1", "Mug v2")
	sb.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointUpdateProduct, Status: http.StatusTooManyRequests, RetryAfter: 2 * time.Second})
	u2 := request(seedKey())
	require.Equal(t, float64(2), u2.JSON(t)["update"].(map[string]any)["product_revision"])
	require.Eventually(t, func() bool { return sb.Calls(marketplace.EndpointUpdateProduct) == putsBefore+1 }, 10*time.Second, 10*time.Millisecond)

	// Revision 3 overtakes it.
	saveDraft("2", "Mug v3")
	key3 := seedKey()
	u3 := request(key3)
	require.Equal(t, float64(3), u3.JSON(t)["update"].(map[string]any)["product_revision"])
	op3 := env.WaitOperation(acct, seedField(t, u3, "operation", "id"))
	require.Equal(t, "succeeded", op3["status"], "%v", op3)
	require.Equal(t, "pushed", op3["result"].(map[string]any)["outcome"])
	require.Equal(t, "Mug v3", title())

	// Revision 2's job comes back after revision 3 was pushed: nothing is sent.
	op2 := env.WaitOperation(acct, seedField(t, u2, "operation", "id"))
	require.Equal(t, "succeeded", op2["status"], "%v", op2)
	require.Equal(t, "superseded", op2["result"].(map[string]any)["outcome"])
	require.Equal(t, float64(3), op2["result"].(map[string]any)["platform_revision"])
	require.Equal(t, "Mug v3", title(), "the listing never went back to revision 2")
	puts := sb.Calls(marketplace.EndpointUpdateProduct)
	require.Equal(t, putsBefore+2, puts, "revision 2's refused PUT and revision 3's")

	// A replayed request returns the same update and starts nothing.
	rows := env.Count(`SELECT count(*) FROM listing_updates`)
	replay := env.Do(servicetest.Request{Method: "POST", Path: updates, Token: acct.AccessToken, Header: key3, Body: map[string]any{}})
	require.Equal(t, http.StatusAccepted, replay.Status, "%s", replay.Body)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(u3.Body), string(replay.Body))
	require.Equal(t, rows, env.Count(`SELECT count(*) FROM listing_updates`))

	// A new request without a draft save is a no-op at the platform.
	same := request(seedKey())
	opSame := env.WaitOperation(acct, seedField(t, same, "operation", "id"))
	require.Equal(t, "superseded", opSame["result"].(map[string]any)["outcome"], "%v", opSame)
	require.Equal(t, puts, sb.Calls(marketplace.EndpointUpdateProduct))
	require.Equal(t, "Mug v3", title())

	// Read back: one update, and the list, newest first.
	one := env.Do(servicetest.Request{Method: "GET", Path: updates + "/" + seedField(t, u3, "update", "id"), Token: acct.AccessToken})
	require.Equal(t, http.StatusOK, one.Status, "%s", one.Body)
	require.Equal(t, "succeeded", seedField(t, one, "update", "status"))
	require.Equal(t, "pushed", seedField(t, one, "update", "outcome"))
	list := env.Do(servicetest.Request{Method: "GET", Path: updates, Token: acct.AccessToken})
	require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)
	items := list.JSON(t)["items"].([]any)
	require.Len(t, items, rows+1)
	require.Equal(t, seedField(t, same, "update", "id"), items[0].(map[string]any)["id"])
	other := env.Do(servicetest.Request{Method: "GET", Path: ws + "/publications/" + productID + "/updates", Token: acct.AccessToken})
	badProblem(t, other, http.StatusNotFound, "PUBLICATION_NOT_FOUND")
}
