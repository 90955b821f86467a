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

var errTestPaused = domain.GuardError(domain.NewError(domain.KindConflict, "TEST_STORE_PAUSED", "the store is paused"))

// TaskGuards.Check, asked without the task's locking read, answers a guard that does not hold
// with its error and leaves the transaction usable: the begin step records the task's failure
// in it. It answers nil when every guard holds.
func TestTaskGuardsCheckLeavesTheTransactionUsable(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := db.Owner.Exec(ctx, `INSERT INTO task_guards (name, aggregate_table, task_column, holds, error_code)
		VALUES ('test: store not paused', 'stores', 'store_id', $$a.name <> 'paused'$$, 'TEST_STORE_PAUSED')`)
	require.NoError(t, err)
	ws := uuid.New()
	store, _, task := seedVerification(ctx, t, db, ws, time.Now().UTC().Truncate(time.Microsecond))
	guards := postgres.TaskGuards{Tables: flows.TaskTables()}
	check := func() (checked error) {
		require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
			checked = guards.Check(ctx, worker.QueueStoreVerification, task.ID)
			_, err := tx.Exec(ctx, `UPDATE store_verifications SET error_code = 'X' WHERE id = $1`, task.ID)
			return err
		}))
		return checked
	}
	require.NoError(t, check())
	_, err = db.Owner.Exec(ctx, `UPDATE stores SET name = 'paused' WHERE id = $1`, store.ID)
	require.NoError(t, err)
	require.ErrorIs(t, check(), errTestPaused, "and the write after it in the same transaction succeeded")
}
