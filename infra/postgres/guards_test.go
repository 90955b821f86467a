package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

var errTestGuard = domain.GuardError(domain.NewError(domain.KindConflict, "TEST_STORE_BLOCKED", "the store is blocked"))

// A declared guard (a row of task_guards) binds every task table with its column: a task
// whose aggregate breaks it is refused at insert with the guard's domain error, and
// TaskGuards.Check (the begin step's check) answers that error for a task already there;
// the declaring flow's own table (except_table) is not bound.
func TestTaskGuards(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := db.Owner.Exec(ctx, `INSERT INTO task_guards (name, aggregate_table, task_column, holds, error_code)
		VALUES ('test: store not blocked', 'stores', 'store_id', $$a.name <> 'blocked'$$, 'TEST_STORE_BLOCKED')`)
	require.NoError(t, err)
	ws := uuid.New()
	now := time.Now().UTC().Truncate(time.Microsecond)
	store, _, task := seedVerification(ctx, t, db, ws, now)
	guards := postgres.TaskGuards{Tables: flows.TaskTables()}
	check := func() error {
		return postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			return guards.Check(ctx, worker.QueueStoreVerification, task.ID)
		})
	}
	insert := func() error {
		op := domain.NewOperation(ws, uuid.Nil, "store.verify", "store", store.ID, now)
		v := domain.NewStoreVerification(uuid.New(), ws, op.ID, store, now)
		return postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			if err := postgres.NewOperations().Insert(ctx, op); err != nil {
				return err
			}
			return postgres.NewStoreVerifications().Insert(ctx, v)
		})
	}
	require.NoError(t, check())
	unfinished := func() (n int) {
		require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) (err error) {
			n, err = guards.Unfinished(ctx, "store_id", store.ID)
			return err
		}))
		return n
	}
	require.Equal(t, 1, unfinished(), "the store's pending verification")

	_, err = db.Owner.Exec(ctx, `UPDATE stores SET name = 'blocked' WHERE id = $1`, store.ID)
	require.NoError(t, err)
	require.ErrorIs(t, check(), errTestGuard)
	require.ErrorIs(t, insert(), errTestGuard)

	_, err = db.Owner.Exec(ctx, `UPDATE task_guards SET except_table = 'store_verifications'`)
	require.NoError(t, err)
	require.NoError(t, check())
	require.NoError(t, insert())
	require.Equal(t, 2, unfinished())
	_, err = db.Owner.Exec(ctx, `UPDATE store_verifications SET status = 'succeeded'`)
	require.NoError(t, err)
	require.Equal(t, 0, unfinished())
}
