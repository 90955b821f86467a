package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// outbox_owes_task and outbox_last_dispatched_job answer for the caller's workspace only
// (RLS), by the task's aggregate and payload key: a pending or leased event is owed, a
// dispatched one (in the log) is the last job, a dead letter is neither.
func TestOutboxTaskQuestions(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	wsA, _ := seedWorkspace(t, db)
	wsB, _ := seedWorkspace(t, db)
	task := uuid.New()

	insert := func(ws uuid.UUID, status string, age string) uuid.UUID {
		t.Helper()
		id := uuid.New()
		table, cols, vals := "outbox_events", "", ""
		switch status {
		case "dispatched":
			table, cols, vals = "outbox_dispatched", ", metadata, attempt_count, dispatched_at", ", '{}', 0, now()"
		case "leased":
			cols, vals = ", locked_by, locked_until", ", 'w', now() + interval '1 minute'"
		case "dead_letter":
			cols, vals = ", status", ", 'dead_letter'"
		}
		_, err := db.Owner.Exec(ctx, `INSERT INTO `+table+` (id, workspace_id, event_type, destination,
			aggregate_type, aggregate_id, event_payload, created_at`+cols+`)
			VALUES ($1, $2, 'test.requested', 'test', 'test', 'agg', jsonb_build_object('task_id', $3::text), now() - $4::interval`+vals+`)`,
			id, ws, task, age)
		require.NoError(t, err)
		return id
	}
	ask := func(ws uuid.UUID) (owes bool, last string) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, db.App, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('app.workspace_id', $1, true)`, ws.String()); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT outbox_owes_task('test', 'agg', 'task_id', $1),
				coalesce(outbox_last_dispatched_job('test', 'agg', 'task_id', $1)::text, '')`, task.String()).Scan(&owes, &last)
		}))
		return owes, last
	}

	owes, last := ask(wsA)
	require.False(t, owes)
	require.Empty(t, last)

	// Workspace B's events say nothing about workspace A.
	insert(wsB, "pending", "0s")
	insert(wsB, "dispatched", "0s")
	owes, last = ask(wsA)
	require.False(t, owes)
	require.Empty(t, last)

	older := insert(wsA, "dispatched", "2 hours")
	newer := insert(wsA, "dispatched", "1 hour")
	insert(wsA, "dead_letter", "0s")
	owes, last = ask(wsA)
	require.False(t, owes, "dispatched and dead letters are not owed")
	require.Equal(t, newer.String(), last, "the latest dispatched event, not %s", older)

	leased := insert(wsA, "leased", "0s")
	owes, _ = ask(wsA)
	require.True(t, owes, "a leased event is owed")
	_, err := db.Owner.Exec(ctx, `DELETE FROM outbox_events WHERE id = $1`, leased)
	require.NoError(t, err)
	insert(wsA, "pending", "0s")
	owes, _ = ask(wsA)
	require.True(t, owes, "a pending event is owed")
	owes, _ = ask(wsB)
	require.True(t, owes)

	// Without a workspace, nothing is owed and nothing was dispatched.
	var n int
	require.NoError(t, db.App.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, db.App.QueryRow(ctx, `SELECT outbox_owes_task('test', 'agg', 'task_id', $1)::int`, task.String()).Scan(&n))
	require.Zero(t, n)
}
