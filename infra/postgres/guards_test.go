package postgres_test

import (
	"context"
	"errors"
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

var errTestGuard = domain.GuardError(domain.NewError(domain.KindConflict, "TEST_STORE_BLOCKED", "the store is blocked"))

// A declared guard (a row of task_guards) binds every task table with its column: a task
// whose aggregate breaks it is refused at insert with the guard's domain error, and
// TaskGuards.Check (the begin step's check) answers that error for a task already there,
// leaving the transaction usable (the begin step records the task's failure in it); the
// declaring flow's own table (except_table) is not bound.
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
		var checked error
		require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
			checked = guards.Check(ctx, worker.QueueStoreVerification, task.ID)
			_, err := tx.Exec(ctx, `UPDATE store_verifications SET error_code = 'X' WHERE id = $1`, task.ID)
			return err
		}), "a write after the check, in its transaction")
		return checked
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

// A task's locking read under port.CheckingGuards checks its guards in the same statement:
// TaskGuards.Check of that task then answers from it, without a statement of its own, what
// held when the row was locked (a change of the store committed after that is not seen:
// the answer is the read's), and the guard's refusal; in a group transaction the read sent
// ahead (port.LockPreloader) does the same. Without the mark, Check reads the row itself.
func TestTaskGuardsCheckedByTheLockingRead(t *testing.T) {
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
	counter := &tripCounter{}
	pool := tracedPool(ctx, t, db, 4, counter)
	tasks := postgres.NewStoreVerifications()
	guards := postgres.TaskGuards{Tables: flows.TaskTables()}
	name := func(n string) {
		_, err := db.Owner.Exec(ctx, `UPDATE stores SET name = $2 WHERE id = $1`, store.ID, n)
		require.NoError(t, err)
	}
	// check locks the task under mark, renames the store to rename (committed beside), then
	// checks: Check's answer and its round trips (a refusal raised by its own statement fails
	// the transaction).
	check := func(mark func(context.Context) context.Context, rename string) (checked error, trips int64) {
		err := postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			if _, err := tasks.Update(port.LockingOperation(mark(ctx)), task.ID, func(*domain.StoreVerification) error {
				return worker.ErrSkip // nothing to write
			}); !errors.Is(err, worker.ErrSkip) {
				return err
			}
			name(rename)
			before := counter.trips.Load()
			checked = guards.Check(ctx, worker.QueueStoreVerification, task.ID)
			trips = counter.trips.Load() - before
			return nil
		})
		if checked == nil {
			require.NoError(t, err)
		}
		return checked, trips
	}
	unmarked := func(ctx context.Context) context.Context { return ctx }

	err, trips := check(port.CheckingGuards, "blocked")
	require.NoError(t, err, "the guard held when the task was locked")
	require.Zero(t, trips)
	err, trips = check(port.CheckingGuards, "open")
	require.ErrorIs(t, err, errTestGuard, "the store was blocked when the task was locked")
	require.Zero(t, trips)
	err, trips = check(unmarked, "blocked")
	require.ErrorIs(t, err, errTestGuard, "Check reads the store as it is now")
	require.EqualValues(t, 1, trips)
	err, trips = check(unmarked, "open")
	require.NoError(t, err)
	require.EqualValues(t, 1, trips)

	// Read ahead by a group transaction.
	name("blocked")
	tr := postgres.Transactor{Pool: pool}
	var checked error
	trips = -1
	require.NoError(t, tr.InGroupTx(tasks.PreloadLocking(port.CheckingGuards(ctx), task.ID), ws, task.ID, func(ctx context.Context) error {
		if _, err := tasks.Update(port.LockingOperation(ctx), task.ID, func(*domain.StoreVerification) error {
			return worker.ErrSkip
		}); !errors.Is(err, worker.ErrSkip) {
			return err
		}
		before := counter.trips.Load()
		checked = guards.Check(ctx, worker.QueueStoreVerification, task.ID)
		trips = counter.trips.Load() - before
		return nil
	}))
	require.ErrorIs(t, checked, errTestGuard)
	require.Zero(t, trips)
}
