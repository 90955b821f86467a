package console_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/console"
)

var consoleFlows = []console.Flow{
	{Name: "material_transfer", Queue: "material-transfer", Table: "material_transfers"},
	{Name: "ai_task", Queue: "ai-task", Table: "ai_tasks"},
}

// transfer inserts, as the owner, a material transfer in status with its operation, last
// moved ago: its operation's id.
func transfer(t *testing.T, b pagesBundle, ws uuid.UUID, status, code string, attempts int, ago time.Duration) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	op := uuid.New()
	at := time.Now().Add(-ago)
	msg := ""
	if code != "" {
		msg = "what " + code + " said"
	}
	_, err := b.db.Owner.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id, error_code, error_message, created_at, updated_at)
		VALUES ($1, $2, 'material_transfer', $3, 'media', gen_random_uuid(), $4, $5, $6, $6)`, op, ws, status, code, msg, at)
	require.NoError(t, err)
	_, err = b.db.Owner.Exec(ctx, `INSERT INTO material_transfers (id, workspace_id, operation_id, status, source_url, media_id,
		attempts, error_code, error_message, created_at, updated_at)
		VALUES (gen_random_uuid(), $1, $2, $3, 'https://example.com/a.png', gen_random_uuid(), $4, $5, $6, $7, $7)`,
		ws, op, status, attempts, code, msg, at)
	require.NoError(t, err)
	return op
}

// The failures page lists failed operations of every workspace, latest first, with the
// code, message and attempts of their tasks, by page, filtered by flow, code and time.
func TestFailuresPage(t *testing.T) {
	b := setupPagesWith(t, func(c *console.Config) { c.Flows = consoleFlows })
	acme, bolt := b.workspace(t), b.workspace(t)
	var acmeFailed []uuid.UUID
	for i := range 52 {
		acmeFailed = append(acmeFailed, transfer(t, b, acme, "failed", "PLATFORM_UNAVAILABLE", 3, time.Duration(i+2)*time.Minute))
	}
	old := transfer(t, b, acme, "failed", "PLATFORM_UNAVAILABLE", 3, 3*time.Hour)
	boltFailed := transfer(t, b, bolt, "failed", "SOURCE_URL_FORBIDDEN", 1, time.Minute)
	succeeded := transfer(t, b, bolt, "succeeded", "", 1, time.Minute)

	status, body := b.c.get("/failures")
	require.Equal(t, http.StatusOK, status)
	rows := regexp.MustCompile(`/operations\?id=([0-9a-f-]{36})`).FindAllStringSubmatch(body, -1)
	require.Len(t, rows, 50, "a page")
	require.Equal(t, boltFailed.String(), rows[0][1], "the latest first, whatever its workspace")
	require.Equal(t, acmeFailed[0].String(), rows[1][1])
	require.Contains(t, body, "SOURCE_URL_FORBIDDEN</strong>: what SOURCE_URL_FORBIDDEN said")
	require.Contains(t, body, "/workspaces/"+bolt.String())
	require.Contains(t, body, "<td>material_transfer</td>")
	require.NotContains(t, body, succeeded.String())
	next := regexp.MustCompile(`href="(/failures\?[^"]+)" rel="next"`).FindStringSubmatch(body)
	require.NotNil(t, next, "a next page")

	status, body = b.c.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	require.Equal(t, http.StatusOK, status)
	rows = regexp.MustCompile(`/operations\?id=([0-9a-f-]{36})`).FindAllStringSubmatch(body, -1)
	require.Len(t, rows, 4, "the rest: three of the last hour and one 3 h old")
	require.Equal(t, acmeFailed[49].String(), rows[0][1])
	require.Equal(t, old.String(), rows[3][1])
	require.NotContains(t, body, `rel="next"`)

	status, body = b.c.get("/failures?code=SOURCE_URL_FORBIDDEN")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, regexp.MustCompile(`/operations\?id=`).FindAllString(body, -1), 1)
	require.Contains(t, body, boltFailed.String())

	status, body = b.c.get("/failures?since=1h&code=PLATFORM_UNAVAILABLE&flow=material_transfer")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, old.String(), "failed before the window")
	status, body = b.c.get("/failures?flow=ai_task")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "No failure matches.")

	for _, q := range []string{"flow=nope", "code=drop%20table", "since=2y", "before=yesterday"} {
		status, body = b.c.get("/failures?" + q)
		require.Equal(t, http.StatusBadRequest, status, q)
		require.Contains(t, body, "Bad filter", q)
	}
}

// The workspaces page puts the largest backlog first; a workspace's page shows its backlog
// per flow, its failures and its operations.
func TestWorkspacesPages(t *testing.T) {
	b := setupPagesWith(t, func(c *console.Config) { c.Flows = consoleFlows })
	calm, busy := b.workspace(t), b.workspace(t)
	transfer(t, b, calm, "pending", "", 0, time.Minute)
	failed := transfer(t, b, calm, "failed", "PLATFORM_REJECTED", 2, time.Minute)
	for range 5 {
		transfer(t, b, busy, "pending", "", 0, time.Hour)
	}
	running := transfer(t, b, busy, "running", "", 1, time.Minute)

	status, body := b.c.get("/workspaces")
	require.Equal(t, http.StatusOK, status)
	iBusy, iCalm := strings.Index(body, "/workspaces/"+busy.String()), strings.Index(body, "/workspaces/"+calm.String())
	require.Positive(t, iBusy)
	require.Positive(t, iCalm)
	require.Less(t, iBusy, iCalm, "the largest backlog first")
	require.Contains(t, body, `<a href="/workspaces/`+calm.String()+`#workspace-failures">1</a>`, "its failures link to its own")

	status, body = b.c.get("/workspaces/" + busy.String())
	require.Equal(t, http.StatusOK, status)
	require.Regexp(t, `<tr><td>material_transfer</td><td>5</td><td>1</td>`, body)
	require.Contains(t, body, running.String())
	status, body = b.c.get("/workspaces/" + calm.String())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "PLATFORM_REJECTED: what PLATFORM_REJECTED said")
	require.Contains(t, body, failed.String())

	status, _ = b.c.get("/workspaces/" + uuid.NewString())
	require.Equal(t, http.StatusNotFound, status)
	status, _ = b.c.get("/workspaces/nope")
	require.Equal(t, http.StatusBadRequest, status)
}
