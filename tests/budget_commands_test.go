package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/internal/servicetest"
)

// TestWorkspaceBudgetCountsCommands: a workspace's commands on the command stream draw from
// the budget its HTTP requests draw from (WORKSPACE_RATE_LIMIT). Commands beyond it are
// deferred (no reply, the entry stays pending), and the last delivery answers RATE_LIMITED;
// meanwhile another workspace's command is served at once.
func TestWorkspaceBudgetCountsCommands(t *testing.T) {
	t.Parallel()
	const burst = 3 // one taken by creating the integration, two left for commands
	ce := startCommands(t, func(c *config.Config) {
		c.WorkspaceRateLimit = domain.RateLimit{PerSecond: 0.01, Burst: burst}
		c.CommandsClaimIdle = 300 * time.Millisecond
		c.CommandsMaxDeliveries = 2
	})
	integration := func(acct servicetest.Account) (string, string) {
		in := ce.Do(servicetest.Request{Method: "POST", Path: "/v1/workspaces/" + acct.WorkspaceID + "/integrations",
			Token: acct.AccessToken, Body: map[string]any{"name": "ERP"}})
		require.Equal(t, http.StatusCreated, in.Status, "%s", in.Body)
		m := in.JSON(t)
		return m["integration"].(map[string]any)["id"].(string), m["secret"].(string)
	}
	busy, quiet := ce.Register("budget-cmd-busy@example.com"), ce.Register("budget-cmd-quiet@example.com")
	busyInteg, busySecret := integration(busy)
	quietInteg, quietSecret := integration(quiet)
	ce.start()

	// A publish of a product that does not exist: answered 404 once the budget let it run.
	publish := func(acct servicetest.Account, integ, secret, id string) {
		ev := command(id, "listing.publish", acct.WorkspaceID, integ,
			map[string]any{"product_id": uuid.NewString(), "store_id": uuid.NewString()})
		ce.send(t, map[string]any{"event": ev, "signature": sign(secret, ev)})
	}
	ids := []string{"busy-1", "busy-2", "busy-3", "busy-4"}
	for _, id := range ids {
		publish(busy, busyInteg, busySecret, id)
	}
	served, limited := 0, 0
	for _, id := range ids {
		r := ce.repliesTo(t, id, 1)[0]
		switch code := problemCode(t, r); code {
		case domain.ErrProductNotFound.Code:
			served++
		case domain.ErrRateLimited.Code:
			limited++
		default:
			t.Fatalf("%s: %s", id, r.Data)
		}
	}
	require.Equal(t, burst-1, served, "the commands within the budget left by the HTTP request")
	require.Equal(t, len(ids)-(burst-1), limited, "the commands beyond it, answered at their last delivery")

	// The busy workspace's budget is spent; the quiet one's command runs at once.
	start := time.Now()
	publish(quiet, quietInteg, quietSecret, "quiet-1")
	r := ce.repliesTo(t, "quiet-1", 1)[0]
	require.Equal(t, domain.ErrProductNotFound.Code, problemCode(t, r), "%s", r.Data)
	require.Less(t, time.Since(start), 5*time.Second)
	publish(busy, busyInteg, busySecret, "busy-5")
	require.Equal(t, domain.ErrRateLimited.Code, problemCode(t, ce.repliesTo(t, "busy-5", 1)[0]))
	require.Zero(t, ce.Count(`SELECT count(*) FROM publications`), "nothing was written")
}
