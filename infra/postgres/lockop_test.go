package postgres_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// tripCounter counts the round trips of a pool (one per query, one per batch).
type tripCounter struct{ trips atomic.Int64 }

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.trips.Add(1)
	return ctx
}
func (*tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}
func (*tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A task's locking read in a context marked port.LockingOperation locks and reads its
// operation in the same round trip; the operations repository's next locking read takes that
// row without a round trip of its own, and one after a write of the operation reads it again.
func TestLockingOperationReadsTheOperationWithTheTask(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws := uuid.New()
	store := domain.Store{ID: uuid.New(), WorkspaceID: ws, CredentialsVersion: 1}
	_, err := db.Owner.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'ws')`, ws)
	require.NoError(t, err)
	_, err = db.Owner.Exec(ctx, `INSERT INTO stores (id, workspace_id, platform, shop_id, name, status)
		VALUES ($1, $2, 'sandbox', $3, 'test', 'verified')`, store.ID, ws, store.ID.String())
	require.NoError(t, err)
	counter := &tripCounter{}
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: db.AppURL, MaxConns: 2, Tracer: counter})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ops, tasks := postgres.NewOperations(), postgres.NewStoreVerifications()
	now := time.Now().UTC().Truncate(time.Microsecond)
	op := domain.NewOperation(ws, uuid.Nil, "store.verify", "store", store.ID, now)
	task := domain.NewStoreVerification(uuid.New(), ws, op.ID, store, now)
	require.NoError(t, postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		require.NoError(t, ops.Insert(ctx, op))
		return tasks.Insert(ctx, task)
	}))

	trips := func(fn func(ctx context.Context)) int64 {
		before := counter.trips.Load()
		require.NoError(t, postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			fn(ctx)
			return nil
		}))
		return counter.trips.Load() - before
	}
	// Unmarked: BEGIN, the task, the operation, COMMIT (with both writes).
	require.EqualValues(t, 4, trips(func(ctx context.Context) {
		_, err := tasks.UpdateAtCommit(ctx, task.ID, func(*domain.StoreVerification) error { return nil })
		require.NoError(t, err)
		_, err = ops.UpdateAtCommit(ctx, op.ID, func(*domain.Operation) error { return nil })
		require.NoError(t, err)
	}))
	// Marked: the task's read also locks the operation; the COMMIT carries both writes (BEGIN,
	// the task and its operation, COMMIT).
	require.EqualValues(t, 3, trips(func(ctx context.Context) {
		_, err := tasks.UpdateAtCommit(port.LockingOperation(ctx), task.ID, func(*domain.StoreVerification) error { return nil })
		require.NoError(t, err)
		got, err := ops.UpdateAtCommit(ctx, op.ID, func(o *domain.Operation) error {
			_, err := o.Start(now)
			return err
		})
		require.NoError(t, err)
		require.Equal(t, domain.OperationRunning, got.Status)
		require.Equal(t, 2, got.Version)
	}))
	// The kept row is taken once: after a write the operation is read again, as written.
	trips(func(ctx context.Context) {
		_, err := tasks.Update(port.LockingOperation(ctx), task.ID, func(*domain.StoreVerification) error { return nil })
		require.NoError(t, err)
		_, err = ops.Update(ctx, op.ID, func(o *domain.Operation) error { return o.Succeed([]byte(`{}`), now) })
		require.NoError(t, err)
		got, err := ops.Update(ctx, op.ID, func(*domain.Operation) error { return nil })
		require.NoError(t, err)
		require.Equal(t, domain.OperationSucceeded, got.Status)
		require.Equal(t, 3, got.Version)
	})
	var status string
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT status FROM operations WHERE id = $1`, op.ID).Scan(&status))
	require.Equal(t, "succeeded", status)

	// A group transaction's BEGIN and scope travel with its first statement, or with the
	// COMMIT; one that sends nothing is never begun.
	tr := postgres.Transactor{Pool: pool}
	groupTrips := func(fn func(ctx context.Context) error) int64 {
		before := counter.trips.Load()
		require.NoError(t, tr.InGroupTx(ctx, ws, task.ID, fn))
		return counter.trips.Load() - before
	}
	require.EqualValues(t, 2, groupTrips(func(ctx context.Context) error {
		_, err := tasks.UpdateAtCommit(port.LockingOperation(ctx), task.ID, func(v *domain.StoreVerification) error {
			valid := true
			v.Valid = &valid
			return nil
		})
		require.NoError(t, err)
		_, err = ops.UpdateAtCommit(ctx, op.ID, func(*domain.Operation) error { return nil })
		return err
	}))
	require.EqualValues(t, 1, groupTrips(func(ctx context.Context) error {
		return postgres.BeforeCommit(ctx, nil, `UPDATE store_verifications SET attempts = attempts + 1 WHERE id = $1`, task.ID)
	}))
	require.EqualValues(t, 0, groupTrips(func(context.Context) error { return nil }))
	var valid *bool
	var attempts int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT valid, attempts FROM store_verifications WHERE id = $1`, task.ID).Scan(&valid, &attempts))
	require.True(t, valid != nil && *valid)
	require.Equal(t, task.Attempts+1, attempts)
}
