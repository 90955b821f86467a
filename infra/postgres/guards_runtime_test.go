package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// The locking read of a task table that no guard binds plans the guards' check away
// (sql/086): its plan holds neither task_guard_check nor to_jsonb. A guard declared while
// the service runs, or a column that a guard names added to the table, still binds the
// next locking read of a session whose plan was cached before (the generic plan, forced
// here, is the one a cache keeps): both invalidate it.
func TestTaskGuardDeclaredAtRunTimeBindsCachedLockingReads(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Owner.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	owner(`DELETE FROM task_guards`) // no guard binds store_verifications now
	ws := uuid.New()
	now := time.Now().UTC().Truncate(time.Microsecond)
	store, _, task := seedVerification(ctx, t, db, ws, now)
	pool := tracedPool(ctx, t, db, 1, &tripCounter{}) // one connection: one session's plans
	_, err := pool.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	tasks := postgres.NewStoreVerifications()
	guards := postgres.TaskGuards{Tables: flows.TaskTables()}

	// check locks the task under port.CheckingGuards and answers from that read.
	check := func() (checked error) {
		t.Helper()
		err := postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			if _, err := tasks.Update(port.LockingOperation(port.CheckingGuards(ctx)), task.ID, func(*domain.StoreVerification) error {
				return worker.ErrSkip
			}); !errors.Is(err, worker.ErrSkip) {
				return err
			}
			checked = guards.Check(ctx, worker.QueueStoreVerification, task.ID)
			return nil
		})
		require.NoError(t, err)
		return checked
	}
	plan := func() string {
		t.Helper()
		var lines []string
		require.NoError(t, postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `EXPLAIN (VERBOSE, COSTS OFF) SELECT t.id, task_guard_refusal('store_verifications', to_jsonb(t))
				FROM store_verifications t WHERE t.id = $1 FOR UPDATE OF t`, task.ID)
			if err != nil {
				return err
			}
			lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		}))
		return strings.Join(lines, "\n")
	}
	warm := func() {
		t.Helper()
		for range 8 {
			require.NoError(t, check())
		}
	}

	require.NotContains(t, plan(), "task_guard_check", "no guard binds the table: the check is planned away")
	require.NotContains(t, plan(), "to_jsonb")
	owner(`UPDATE stores SET name = 'blocked' WHERE id = $1`, store.ID)
	warm()

	// A guard declared now binds the cached read.
	owner(`INSERT INTO task_guards (name, aggregate_table, task_column, holds, error_code)
		VALUES ('test: store not blocked', 'stores', 'store_id', $$a.name <> 'blocked'$$, 'TEST_STORE_BLOCKED')`)
	require.ErrorIs(t, check(), errTestGuard)
	require.Contains(t, plan(), "task_guard_check")
	// Its declaring flow's own table is not bound.
	owner(`UPDATE task_guards SET except_table = 'store_verifications'`)
	require.NoError(t, check())
	require.NotContains(t, plan(), "task_guard_check")
	owner(`DELETE FROM task_guards`)
	warm()

	// A guard on a column the table does not have yet: bound once the column is added.
	owner(`INSERT INTO task_guards (name, aggregate_table, task_column, holds, error_code)
		VALUES ('test: store not blocked', 'stores', 'test_store_id', $$a.name <> 'blocked'$$, 'TEST_STORE_BLOCKED')`)
	warm()
	require.NotContains(t, plan(), "task_guard_check")
	owner(`ALTER TABLE store_verifications ADD COLUMN test_store_id uuid`)
	owner(`UPDATE store_verifications SET test_store_id = store_id`)
	require.ErrorIs(t, check(), errTestGuard)
}
