package tests

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/internal/servicetest"
)

// TestWorkspaceBudgetIsSharedAndPerWorkspace: two API servers on one database and one Redis
// draw one workspace's requests from one budget (WORKSPACE_RATE_LIMIT): beyond its burst the
// workspace is answered 429 RATE_LIMITED with Retry-After by either server, while another
// workspace is served by both in the same moment.
func TestWorkspaceBudgetIsSharedAndPerWorkspace(t *testing.T) {
	t.Parallel()
	const burst = 6
	prefix := "tb" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	env := servicetest.Start(t, func(c *config.Config) {
		c.StreamPrefix = prefix // the buckets' keys: <prefix>:rate:workspace:<id>
		c.WorkspaceRateLimit = domain.RateLimit{PerSecond: 0.5, Burst: burst}
	})
	second, cleanup, err := listing.InitializeAPI(context.Background(), env.Config, listing.Options{FastPasswordHashing: true},
		listing.NewRegistry(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	srv := httptest.NewServer(second.Server)
	t.Cleanup(func() {
		srv.Close()
		cleanup()
	})
	urls := []string{env.URL, srv.URL}

	a, b := env.Register("budget-a@example.com"), env.Register("budget-b@example.com")
	get := func(server int, acct servicetest.Account) *http.Response {
		req, err := http.NewRequest("GET", urls[server]+"/v1/workspaces/"+acct.WorkspaceID+"/products", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+acct.AccessToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp
	}

	served := 0
	for i := range burst {
		if get(i%2, a).StatusCode == http.StatusOK {
			served++
		}
	}
	require.Equal(t, burst, served, "the burst, taken through both servers")
	for server := range urls {
		resp := get(server, a)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "server %d: the workspace's budget is spent on both", server)
		wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After in seconds")
		require.GreaterOrEqual(t, wait, 1)
		require.LessOrEqual(t, wait, 2, "one token at 0.5/s")
		require.Equal(t, http.StatusOK, get(server, b).StatusCode, "server %d: another workspace is served meanwhile", server)
	}
	limited := env.Do(servicetest.Request{Method: "GET", Path: "/v1/workspaces/" + a.WorkspaceID + "/operations", Token: a.AccessToken})
	require.Equal(t, http.StatusTooManyRequests, limited.Status)
	require.Equal(t, domain.ErrRateLimited.Code, limited.Code())
	require.Equal(t, "application/problem+json", limited.Header.Get("Content-Type"))

	// A stranger's requests never reach the workspace's budget: refused as non-members first.
	stranger := env.Register("budget-c@example.com")
	for range 3 * burst {
		resp := env.Do(servicetest.Request{Method: "GET", Path: "/v1/workspaces/" + b.WorkspaceID + "/products", Token: stranger.AccessToken})
		require.Equal(t, http.StatusNotFound, resp.Status)
	}
	require.Equal(t, http.StatusOK, get(0, b).StatusCode)
}
