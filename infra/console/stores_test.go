package console_test

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/console"
)

// The workspace page lists its stores with work waiting, the most first, each with its budget
// (its own, or its platform's) and when its backlog is expected to end at that budget; a store
// with no budget is not paced, and another workspace's store is not shown.
func TestWorkspacePageStoresExpectedEnd(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	b := setupPagesWith(t, func(c *console.Config) {
		c.Flows = consoleFlows
		c.StoreRateLimits = map[string]domain.RateLimit{"sandbox": {PerSecond: 5, Burst: 10}}
		c.Now = func() time.Time { return now }
	})
	ws, other := b.workspace(t), b.workspace(t)
	ctx := context.Background()
	store := func(ws uuid.UUID, name, platform string, perSecond float64, burst int, pending, running int) uuid.UUID {
		t.Helper()
		id := uuid.New()
		_, err := b.db.Owner.Exec(ctx, `INSERT INTO stores (id, workspace_id, platform, shop_id, name, status, rate_per_second, rate_burst)
			VALUES ($1, $2, $3, $7, $4, 'verified', $5, $6)`, id, ws, platform, name, perSecond, burst, id.String())
		require.NoError(t, err)
		_, err = b.db.Owner.Exec(ctx, `WITH ops AS (
				INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id)
				SELECT gen_random_uuid(), $1, 'store_verification', 'pending', 'store', $2 FROM generate_series(1, $3::int + $4::int)
				RETURNING id)
			INSERT INTO store_verifications (id, workspace_id, operation_id, store_id, status, credentials_version)
			SELECT gen_random_uuid(), $1, id, $2, CASE WHEN row_number() OVER () <= $3::int THEN 'pending' ELSE 'running' END, 1 FROM ops`,
			ws, id, pending, running)
		require.NoError(t, err)
		return id
	}
	busy := store(ws, "Busy shop", "sandbox", 10, 20, 618, 2) // its own budget: (620 - 20) / 10 s
	quiet := store(ws, "Quiet shop", "sandbox", 0, 0, 30, 0)  // the platform's: (30 - 10) / 5 s
	free := store(ws, "Free shop", "elsewhere", 0, 0, 1, 0)   // no budget
	foreign := store(other, "Foreign shop", "sandbox", 0, 0, 5, 0)

	status, body := b.c.get("/workspaces/" + ws.String())
	require.Equal(t, http.StatusOK, status)
	rows := regexp.MustCompile(`<tr><td>[^<]* <code>([0-9a-f-]{36})</code></td><td>([a-z]+)</td><td>(\d+)</td><td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td></tr>`).
		FindAllStringSubmatch(body, -1)
	require.Len(t, rows, 3, "%s", body)
	require.Equal(t, []string{busy.String(), "sandbox", "618", "2", "10/s, 20 (the store's own)", "2026-12-07 10:01:00Z"}, rows[0][1:])
	require.Equal(t, []string{quiet.String(), "sandbox", "30", "0", "5/s, 10 (the platform's)", "2026-12-07 10:00:04Z"}, rows[1][1:])
	require.Equal(t, []string{free.String(), "elsewhere", "1", "0", "none", "not paced"}, rows[2][1:])
	require.NotContains(t, body, foreign.String())
}
