package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/cloudevent"
	"github.com/listingkit/listing/infra/eventstream"
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

	// The publish operation's acceptance and finish reach the integration event stream once
	// each, as CloudEvents; its start does not (the finish carries started_at). The outbox
	// does not promise order: the versions tell it (version 2, the start, is not published).
	opID := op["id"].(string)
	ropts, err := redis.ParseURL(env.Config.RedisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	var byVersion map[int]string
	var startedAt map[int]*time.Time
	for deadline := time.Now().Add(10 * time.Second); len(byVersion) < 2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		msgs, err := rdb.XRange(context.Background(), eventstream.Stream(env.Config.StreamPrefix), "-", "+").Result()
		require.NoError(t, err)
		byVersion, startedAt = map[int]string{}, map[int]*time.Time{}
		for _, m := range msgs {
			ev, err := cloudevent.FromEntry(m.Values)
			require.NoError(t, err)
			require.Equal(t, acct.WorkspaceID, ev.WorkspaceID)
			if ev.Type != "operation.status_changed" {
				continue
			}
			var data struct {
				OperationID string     `json:"operation_id"`
				Status      string     `json:"status"`
				Version     int        `json:"version"`
				StartedAt   *time.Time `json:"started_at"`
			}
			require.NoError(t, json.Unmarshal(ev.Data, &data))
			if data.OperationID != opID {
				continue
			}
			require.Equal(t, "operation/"+opID, ev.Subject)
			require.NotContains(t, byVersion, data.Version, "version %d delivered twice", data.Version)
			byVersion[data.Version], startedAt[data.Version] = data.Status, data.StartedAt
		}
	}
	require.Equal(t, map[int]string{1: "pending", 3: "succeeded"}, byVersion, "no running event")
	require.Nil(t, startedAt[1], "pending carries no started_at")
	require.NotNil(t, startedAt[3], "the finish carries started_at")
	created, err := time.Parse(time.RFC3339Nano, op["created_at"].(string))
	require.NoError(t, err)
	updated, err := time.Parse(time.RFC3339Nano, op["updated_at"].(string))
	require.NoError(t, err)
	require.False(t, startedAt[3].Before(created) || startedAt[3].After(updated),
		"started_at %s within the operation's life %s … %s", startedAt[3], created, updated)
}
