package postgres_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// Migration 018 loses no event: pending events and dead letters stay in outbox_events as
// they were, a dispatching event stays owed with its lease, and every dispatched event moves
// to the log with its dispatch time. OUTBOX_MIGRATION_HISTORY sets the number of dispatched
// rows (default 20,000); the test logs how long the migration (and so its lock) took.
func TestMigration018KeepsEveryEvent(t *testing.T) {
	t.Parallel()
	m := pgtest.MigrateTo(t, 17)
	ctx := context.Background()

	history := 20000
	if v := os.Getenv("OUTBOX_MIGRATION_HISTORY"); v != "" {
		var err error
		history, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	conn := m.Conn(t)
	ws := uuid.New()
	_, err := conn.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'ws')`, ws)
	require.NoError(t, err)
	// As before 018: dispatched history over the last 9 days, and one event of each other status.
	_, err = conn.Exec(ctx, `
		INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
		                           status, attempt_count, created_at, dispatched_at)
		SELECT gen_random_uuid(), $1, 'thing.happened', 'q', 'thing', g::text, jsonb_build_object('thing_id', g::text),
		       'dispatched', 1, now() - (g % 9) * interval '1 day' - interval '1 second', now() - (g % 9) * interval '1 day'
		FROM generate_series(1, $2) g`, ws, history)
	require.NoError(t, err)
	pending, leased, dead := uuid.New(), uuid.New(), uuid.New()
	_, err = conn.Exec(ctx, `
		INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
		                           status, attempt_count, next_attempt_at, locked_by, locked_until, last_error)
		VALUES ($2, $1, 'thing.happened', 'q', 'thing', 'p', '{}', 'pending', 2, now() + interval '1 minute', NULL, NULL, 'boom'),
		       ($3, $1, 'thing.happened', 'q', 'thing', 'l', '{}', 'dispatching', 0, now(), 'old/1', now() + interval '30 seconds', NULL),
		       ($4, $1, 'thing.happened', 'q', 'thing', 'd', '{}', 'dead_letter', 20, now(), NULL, NULL, 'gone')`,
		ws, pending, leased, dead)
	require.NoError(t, err)
	var before string
	require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(id::text || ':' || coalesce(dispatched_at::text, '') || ':' || attempt_count,
		',' ORDER BY id) FROM outbox_events WHERE status = 'dispatched'`).Scan(&before))

	took := m.UpTo(t, 18)
	t.Logf("migration 018 with %d dispatched rows: %s (outbox_events locked throughout)", history, took.Round(time.Millisecond))

	var after string
	require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(id::text || ':' || dispatched_at::text || ':' || attempt_count,
		',' ORDER BY id) FROM outbox_dispatched`).Scan(&after))
	require.Equal(t, before, after, "every dispatched event is in the log, with its dispatch time")

	type live struct {
		Status, LockedBy, LastError string
		Attempts                    int
	}
	rows, err := conn.Query(ctx, `SELECT id, status, coalesce(locked_by, ''), coalesce(last_error, ''), attempt_count FROM outbox_events`)
	require.NoError(t, err)
	got := map[uuid.UUID]live{}
	for rows.Next() {
		var id uuid.UUID
		var l live
		require.NoError(t, rows.Scan(&id, &l.Status, &l.LockedBy, &l.LastError, &l.Attempts))
		got[id] = l
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[uuid.UUID]live{
		pending: {Status: "pending", LastError: "boom", Attempts: 2},
		leased:  {Status: "pending", LockedBy: "old/1"},
		dead:    {Status: "dead_letter", LastError: "gone", Attempts: 20},
	}, got)
	var status string
	require.NoError(t, conn.QueryRow(ctx, `SELECT status FROM outbox_all_events WHERE id = $1`, leased).Scan(&status))
	require.Equal(t, "dispatching", status, "operators still see the lease")

	var forced bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT bool_and(relforcerowsecurity) FROM pg_class
		WHERE oid IN ('outbox_events'::regclass, 'outbox_dispatched'::regclass)`).Scan(&forced))
	require.True(t, forced, "RLS forced on both tables after the move")

	// The rest of the migrations apply on top.
	m.Up(t)
}
