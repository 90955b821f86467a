package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// appOutbox runs `app outbox <args...>` against db as listing_operator and returns its
// standard output, its standard error and whether it exited 0.
func appOutbox(t *testing.T, db *pgtest.DB, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	return appOutboxAs(t, db, db.OperatorURL, args...)
}

// appOutboxAs runs `app outbox <args...>` with OPERATOR_DATABASE_URL=operatorURL.
func appOutboxAs(t *testing.T, db *pgtest.DB, operatorURL string, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	cmd := exec.Command(seedBinary(t), append([]string{"outbox"}, args...)...)
	for k, v := range seedEnv(db.AppURL, seedPrefix(), map[string]string{"OPERATOR_DATABASE_URL": operatorURL}) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), err == nil
}

// The operators' tool, run as the real binary and as listing_operator: stats across workspaces, list and show of one
// workspace's dead letters, redrive and purge with who and why required and recorded.
func TestOutboxOperatorCLI(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ws := uuid.New()
	_, err := db.Owner.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'ops')`, ws)
	require.NoError(t, err)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	for i, id := range ids {
		_, err := db.Owner.Exec(ctx, `INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
			event_payload, status, attempt_count, last_error)
			VALUES ($1, $2, 'store.verification_requested', 'store-verification', 'store', $3, '{"store_id":"x"}', 'dead_letter', 20, 'dial tcp: refused')`,
			id, ws, fmt.Sprint(i))
		require.NoError(t, err)
	}

	// Two events delivered a minute ago: they live in the log of dispatched events.
	_, err = db.Owner.Exec(ctx, `INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type,
		aggregate_id, event_payload, metadata, attempt_count, created_at, dispatched_at)
		SELECT gen_random_uuid(), $1, 'store.verification_requested', 'store-verification', 'store', 'a', '{}', '{}', 1,
		       now() - interval '62 seconds', now() - interval '61 seconds' FROM generate_series(1, 2)`, ws)
	require.NoError(t, err)

	out, errOut, ok := appOutbox(t, db, "stats")
	require.True(t, ok, errOut)
	var stats struct {
		ByStatus  map[string]struct{ Events, Workspaces int } `json:"by_status"`
		Delivered struct {
			LastHour      int            `json:"last_hour"`
			ByDestination map[string]int `json:"by_destination"`
			PerMinute     []int          `json:"per_minute"`
		} `json:"delivered"`
		MaxLatency float64 `json:"delivered_max_latency_seconds"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &stats), out)
	require.Equal(t, 3, stats.ByStatus["dead_letter"].Events)
	require.Equal(t, 1, stats.ByStatus["dead_letter"].Workspaces)
	require.Equal(t, 2, stats.Delivered.LastHour, out)
	require.Equal(t, map[string]int{"store-verification": 2}, stats.Delivered.ByDestination)
	require.Len(t, stats.Delivered.PerMinute, 60)
	require.InDelta(t, 1, stats.MaxLatency, 0.01)
	_, errOut, ok = appOutboxAs(t, db, db.AppURL, "stats")
	require.False(t, ok, "app_user cannot read the operators' stats")
	require.Contains(t, errOut, "permission denied")

	out, errOut, ok = appOutbox(t, db, "list", "-workspace", ws.String(), "-status", "dead_letter")
	require.True(t, ok, errOut)
	var list struct{ Items []struct{ ID uuid.UUID } }
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list.Items, 3)

	out, errOut, ok = appOutbox(t, db, "show", "-workspace", ws.String(), "-id", ids[0].String())
	require.True(t, ok, errOut)
	require.Contains(t, out, "dial tcp: refused")

	// Who and why are required; nothing changes without them.
	_, errOut, ok = appOutbox(t, db, "purge", "-workspace", ws.String(), "-all", "-by", "ops@example.test")
	require.False(t, ok)
	require.Contains(t, errOut, "reason is required")
	_, _, ok = appOutbox(t, db, "redrive", "-workspace", ws.String(), "-id", ids[0].String(), "-reason", "fixed")
	require.False(t, ok)

	out, errOut, ok = appOutbox(t, db, "redrive", "-workspace", ws.String(), "-id", ids[0].String(), "-by", "ops@example.test", "-reason", "queue fixed")
	require.True(t, ok, errOut)
	var redriven struct{ Redriven []uuid.UUID }
	require.NoError(t, json.Unmarshal([]byte(out), &redriven), out)
	require.Equal(t, []uuid.UUID{ids[0]}, redriven.Redriven)

	out, errOut, ok = appOutbox(t, db, "purge", "-workspace", ws.String(), "-all", "-by", "ops@example.test", "-reason", "stores deleted")
	require.True(t, ok, errOut)
	var purged struct{ Purged []uuid.UUID }
	require.NoError(t, json.Unmarshal([]byte(out), &purged), out)
	require.ElementsMatch(t, ids[1:], purged.Purged, "the redriven event is pending again, not purged")

	var left, audited int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM outbox_all_events WHERE status = 'pending' AND id = $1`, ids[0]).Scan(&left))
	require.Equal(t, 1, left)
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM outbox_purges WHERE purged_by = 'ops@example.test' AND reason = 'stores deleted') +
		(SELECT count(*) FROM outbox_redrives WHERE redriven_by = 'ops@example.test' AND reason = 'queue fixed')`).Scan(&audited))
	require.Equal(t, 3, audited)
}
