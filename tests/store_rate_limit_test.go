package tests

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/internal/servicetest"
)

// TestStoreRateLimitOverride: a store shows its platform's budget until it gets its own (PUT
// …/rate-limit, no idempotency key), which the workers' budget takes from the store as they
// load it (app_user, RLS on); DELETE returns it to the platform's. Invalid limits are 400
// with the usual problem body.
func TestStoreRateLimitOverride(t *testing.T) {
	t.Parallel()
	platform := domain.RateLimit{PerSecond: 10, Burst: 20}
	env := servicetest.Start(t, func(c *config.Config) { c.StoreRateLimits = config.RateLimits{"sandbox": platform} })
	acct := env.Register("ratelimit@example.com")
	ws := "/v1/workspaces/" + acct.WorkspaceID
	do := func(method, path string, body any, header map[string]string) servicetest.Response {
		return env.Do(servicetest.Request{Method: method, Path: ws + path, Token: acct.AccessToken, Header: header, Body: body})
	}
	created := do("POST", "/stores", map[string]any{"platform": "sandbox", "shop_id": "shop-r", "name": "Shop",
		"credentials": map[string]string{"api_key": "sk_test_rate"}}, idemKey())
	require.Equal(t, http.StatusCreated, created.Status, "%s", created.Body)
	storeID := created.JSON(t)["store"].(map[string]any)["id"].(string)
	limitOf := func(r servicetest.Response) any { return r.JSON(t)["store"].(map[string]any)["rate_limit"] }
	require.Equal(t, map[string]any{"per_second": 10.0, "burst": 20.0, "source": "platform"}, limitOf(created))

	// What the workers' budget finds for the store, read as a worker reads it.
	budget := &worker.StoreBudget{Platforms: map[string]domain.RateLimit{"sandbox": platform}}
	workerLimit := func() domain.RateLimit {
		var s domain.Store
		require.NoError(t, postgres.InTx(context.Background(), env.DB.App, postgres.Scope{WorkspaceID: uuid.MustParse(acct.WorkspaceID)},
			func(ctx context.Context, _ pgx.Tx) error {
				var err error
				s, err = postgres.NewStores().Get(ctx, uuid.MustParse(storeID))
				return err
			}))
		return budget.Limit(s)
	}
	require.Equal(t, platform, workerLimit())

	set := do("PUT", "/stores/"+storeID+"/rate-limit", map[string]any{"per_second": 2.5, "burst": 5}, nil)
	require.Equal(t, http.StatusOK, set.Status, "%s", set.Body)
	require.Equal(t, map[string]any{"per_second": 2.5, "burst": 5.0, "source": "store"}, limitOf(set))
	require.Equal(t, map[string]any{"per_second": 2.5, "burst": 5.0, "source": "store"}, limitOf(do("GET", "/stores/"+storeID, nil, nil)))
	require.Equal(t, domain.RateLimit{PerSecond: 2.5, Burst: 5}, workerLimit(), "the next task of the store draws on its own limit")
	again := do("PUT", "/stores/"+storeID+"/rate-limit", map[string]any{"per_second": 2.5, "burst": 5}, nil)
	require.Equal(t, http.StatusOK, again.Status, "setting it again is harmless")

	for _, c := range []struct {
		body  any
		code  string
		field string
	}{
		{map[string]any{"per_second": 0, "burst": 5}, "VALIDATION_FAILED", "per_second"},
		{map[string]any{"per_second": -1, "burst": 5}, "VALIDATION_FAILED", "per_second"},
		{map[string]any{"per_second": 1, "burst": 0}, "VALIDATION_FAILED", "burst"},
		{map[string]any{"per_second": 1, "burst": 2000000}, "VALIDATION_FAILED", "burst"},
		{map[string]any{"per_second": 1}, "VALIDATION_FAILED", "burst"},
		{map[string]any{"per_second": 1, "burst": 1.5}, "VALIDATION_FAILED", "burst"},
		{map[string]any{"per_second": 1, "burst": 2, "rate": 3}, "UNKNOWN_FIELD", "rate"},
	} {
		resp := do("PUT", "/stores/"+storeID+"/rate-limit", c.body, nil)
		require.Equal(t, http.StatusBadRequest, resp.Status, "%v: %s", c.body, resp.Body)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		require.Equal(t, c.code, resp.Code(), "%v", c.body)
		require.Contains(t, string(resp.Body), c.field, "%v", c.body)
	}
	require.Equal(t, domain.RateLimit{PerSecond: 2.5, Burst: 5}, workerLimit(), "a refused limit changes nothing")
	missing := do("PUT", "/stores/"+uuid.NewString()+"/rate-limit", map[string]any{"per_second": 1, "burst": 1}, nil)
	require.Equal(t, http.StatusNotFound, missing.Status)
	require.Equal(t, domain.ErrStoreNotFound.Code, missing.Code())

	back := do("DELETE", "/stores/"+storeID+"/rate-limit", nil, nil)
	require.Equal(t, http.StatusOK, back.Status, "%s", back.Body)
	require.Equal(t, map[string]any{"per_second": 10.0, "burst": 20.0, "source": "platform"}, limitOf(back))
	require.Equal(t, platform, workerLimit())
}
