package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/servicetest"
)

// TestRetryAfterSnoozesThePublishJob: a marketplace that answers the product creation with
// a 503 or a 429 and Retry-After: 20 leaves the publish job delayed for at least 20 s with
// attemptsMade unchanged: the wait the gateway asked for spends no attempt.
func TestRetryAfterSnoozesThePublishJob(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			env := servicetest.StartAll(t)
			acct := env.Register("snooze@example.com")
			storeID := seedVerifiedStore(t, env, acct, "snooze")
			productID := seedProduct(t, env, acct)
			env.Work.Externals.MarketplaceSandbox.InjectFault(sandbox.Fault{Endpoint: marketplace.EndpointCreateProduct,
				Status: status, RetryAfter: 20 * time.Second})

			before := time.Now()
			pub := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products/" + productID + "/publications",
				Token: acct.AccessToken, Header: seedKey(), Body: map[string]any{"store_id": storeID}})
			require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
			jobID := seedOutbox(t, env.DB, acct.WorkspaceID, "listing-publish").ID

			rdb, ctx := env.API.Redis, context.Background()
			k := env.Config.BullMQPrefix + ":listing-publish:"
			var score float64
			seedEventually(t, 30*time.Second, func() bool {
				s, err := rdb.ZScore(ctx, k+"delayed", jobID).Result()
				score = s
				return err == nil
			}, "job %s never delayed", jobID)
			due := time.UnixMilli(int64(score) / 0x1000)
			require.GreaterOrEqual(t, due.Sub(before), 20*time.Second, "delayed until %s", due)
			h := rdb.HGetAll(ctx, k+jobID).Val()
			require.Contains(t, []string{"", "0"}, h["atm"], "attemptsMade unchanged")
			require.Equal(t, "1", h["snz"])
			require.Equal(t, "running", seedOne(t, env.DB, "SELECT status FROM publications WHERE id = $1",
				seedField(t, pub, "publication", "id")))
		})
	}
}
