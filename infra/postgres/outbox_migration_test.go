package postgres_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// outboxAt17 is a database at version 17 holding dispatched history over the last 9 days
// (OUTBOX_MIGRATION_HISTORY rows, default 20,000) and one pending, one leased (dispatching)
// and one dead event.
type outboxAt17 struct {
	m                     *pgtest.Migration
	conn                  *pgx.Conn
	history               int
	pending, leased, dead uuid.UUID
	// dispatched lists the dispatched events as id:dispatched_at:attempts, in id order.
	dispatched string
}

func seedOutboxAt17(t *testing.T) *outboxAt17 {
	t.Helper()
	o := &outboxAt17{m: pgtest.MigrateTo(t, 17), history: 20000}
	ctx := context.Background()
	if v := os.Getenv("OUTBOX_MIGRATION_HISTORY"); v != "" {
		var err error
		o.history, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	o.conn = o.m.Conn(t)
	ws, ws2 := uuid.New(), uuid.New()
	_, err := o.conn.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'ws'), ($2, 'ws2')`, ws, ws2)
	require.NoError(t, err)
	// As before 018: dispatched history over the last 9 days, in two workspaces.
	_, err = o.conn.Exec(ctx, `
		INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
		                           status, attempt_count, created_at, dispatched_at)
		SELECT gen_random_uuid(), CASE WHEN g % 3 = 0 THEN $3::uuid ELSE $1::uuid END, 'thing.happened', 'q', 'thing', g::text,
		       jsonb_build_object('thing_id', g::text), 'dispatched', 1 + g % 2,
		       now() - (g % 9) * interval '1 day' - interval '1 second', now() - (g % 9) * interval '1 day'
		FROM generate_series(1, $2) g`, ws, o.history, ws2)
	require.NoError(t, err)
	o.pending, o.leased, o.dead = uuid.New(), uuid.New(), uuid.New()
	_, err = o.conn.Exec(ctx, `
		INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
		                           status, attempt_count, next_attempt_at, locked_by, locked_until, last_error)
		VALUES ($2, $1, 'thing.happened', 'q', 'thing', 'p', '{}', 'pending', 2, now() + interval '1 minute', NULL, NULL, 'boom'),
		       ($3, $1, 'thing.happened', 'q', 'thing', 'l', '{}', 'dispatching', 0, now(), 'old/1', now() + interval '30 seconds', NULL),
		       ($4, $1, 'thing.happened', 'q', 'thing', 'd', '{}', 'dead_letter', 20, now(), NULL, NULL, 'gone')`,
		ws, o.pending, o.leased, o.dead)
	require.NoError(t, err)
	require.NoError(t, o.conn.QueryRow(ctx, `SELECT string_agg(id::text || ':' || coalesce(dispatched_at::text, '') || ':' || attempt_count,
		',' ORDER BY id) FROM outbox_events WHERE status = 'dispatched'`).Scan(&o.dispatched))
	return o
}

// requireEveryEvent checks, after 018, that every dispatched event is in the log with its
// dispatch time and the owed and dead ones are live as they were.
func (o *outboxAt17) requireEveryEvent(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var after string
	require.NoError(t, o.conn.QueryRow(ctx, `SELECT string_agg(id::text || ':' || dispatched_at::text || ':' || attempt_count,
		',' ORDER BY id) FROM outbox_dispatched`).Scan(&after))
	require.Equal(t, o.dispatched, after, "every dispatched event is in the log, with its dispatch time")

	type live struct {
		Status, LockedBy, LastError string
		Attempts                    int
	}
	rows, err := o.conn.Query(ctx, `SELECT id, status, coalesce(locked_by, ''), coalesce(last_error, ''), attempt_count FROM outbox_events`)
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
		o.pending: {Status: "pending", LastError: "boom", Attempts: 2},
		o.leased:  {Status: "pending", LockedBy: "old/1"},
		o.dead:    {Status: "dead_letter", LastError: "gone", Attempts: 20},
	}, got)
	var status string
	require.NoError(t, o.conn.QueryRow(ctx, `SELECT status FROM outbox_all_events WHERE id = $1`, o.leased).Scan(&status))
	require.Equal(t, "dispatching", status, "operators still see the lease")

	var forced bool
	require.NoError(t, o.conn.QueryRow(ctx, `SELECT bool_and(relforcerowsecurity) FROM pg_class
		WHERE oid IN ('outbox_events'::regclass, 'outbox_dispatched'::regclass)`).Scan(&forced))
	require.True(t, forced, "RLS forced on both tables after the move")
}

// Migration 018 loses no event: pending events and dead letters stay in outbox_events as
// they were, a dispatching event stays owed with its lease, and every dispatched event moves
// to the log with its dispatch time. The test logs how long the migration (and so its lock
// on outbox_events) took.
func TestMigration018KeepsEveryEvent(t *testing.T) {
	t.Parallel()
	o := seedOutboxAt17(t)
	took := o.m.UpTo(t, 18)
	t.Logf("migration 018 with %d dispatched rows: %s (outbox_events locked throughout)", o.history, took.Round(time.Millisecond))
	o.requireEveryEvent(t)
	// The rest of the migrations apply on top.
	o.m.Up(t)
}

// postgres.Migrate on a database before 018 stages the dispatched history in batches, so that
// 018's lock covers no history, then moves it to the log: every event survives and the staging
// table is gone (the longest batch is logged).
func TestMigrateStagesTheOutboxHistory(t *testing.T) {
	t.Parallel()
	o := seedOutboxAt17(t)
	start := time.Now()
	_, mv, err := postgres.MigrateReporting(context.Background(), o.m.URL, false)
	require.NoError(t, err)
	t.Logf("migrate with %d dispatched rows staged: %s in all; longest batch %s (the longest lock on outbox_events)",
		o.history, time.Since(start).Round(time.Millisecond), mv.LongestBatch.Round(time.Millisecond))
	require.Equal(t, int64(o.history), mv.Staged, "the whole history was staged before 018")
	require.Equal(t, int64(o.history), mv.Moved)
	o.requireEveryEvent(t)
	var staged *string
	require.NoError(t, o.conn.QueryRow(context.Background(), `SELECT to_regclass('outbox_history_staged')::text`).Scan(&staged))
	require.Nil(t, staged, "the staging table is dropped")

	// A second run does nothing.
	applied, mv, err := postgres.MigrateReporting(context.Background(), o.m.URL, false)
	require.NoError(t, err)
	require.Empty(t, applied)
	require.Zero(t, mv.Staged+mv.Moved)
}
