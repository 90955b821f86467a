package postgres_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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

// tracedPool opens a pool of conns connections as app_user on db, traced by tracer, closed
// when the test ends.
func tracedPool(ctx context.Context, t *testing.T, db *pgtest.DB, conns int32, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: db.AppURL, MaxConns: conns, Tracer: tracer})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// seedVerification inserts workspace ws (unless it exists), a verified sandbox store of it,
// and a pending store verification of the store with its operation; it returns all three.
func seedVerification(ctx context.Context, t *testing.T, db *pgtest.DB, ws uuid.UUID, now time.Time) (domain.Store, domain.Operation, domain.StoreVerification) {
	t.Helper()
	_, err := db.Owner.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'ws') ON CONFLICT DO NOTHING`, ws)
	require.NoError(t, err)
	store := domain.Store{ID: uuid.New(), WorkspaceID: ws, CredentialsVersion: 1}
	_, err = db.Owner.Exec(ctx, `INSERT INTO stores (id, workspace_id, platform, shop_id, name, status)
		VALUES ($1, $2, 'sandbox', $3, 'test', 'verified')`, store.ID, ws, store.ID.String())
	require.NoError(t, err)
	op := domain.NewOperation(ws, uuid.Nil, "store.verify", "store", store.ID, now)
	task := domain.NewStoreVerification(uuid.New(), ws, op.ID, store, now)
	require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		if err := postgres.NewOperations().Insert(ctx, op); err != nil {
			return err
		}
		return postgres.NewStoreVerifications().Insert(ctx, task)
	}))
	return store, op, task
}

// A task's locking read in a context marked port.LockingOperation locks and reads its
// operation in the same round trip; the operations repository's next locking read takes that
// row without a round trip of its own, and one after a write of the operation reads it again.
func TestLockingOperationReadsTheOperationWithTheTask(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws := uuid.New()
	now := time.Now().UTC().Truncate(time.Microsecond)
	_, op, task := seedVerification(ctx, t, db, ws, now)
	counter := &tripCounter{}
	pool := tracedPool(ctx, t, db, 2, counter)
	ops, tasks := postgres.NewOperations(), postgres.NewStoreVerifications()

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

// The task's and its operation's locking read locks the task first: while another
// transaction holds the operation's row lock, the read waits with the task already locked.
// A task whose operation is out of sight (another workspace's) is read and locked without
// it, and the operations repository then reports the operation missing, as without the mark.
func TestLockingOperationLocksTheTaskFirst(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, other := uuid.New(), uuid.New()
	_, err := db.Owner.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'other')`, other)
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Microsecond)
	store, op, task := seedVerification(ctx, t, db, ws, now)
	ops, tasks := postgres.NewOperations(), postgres.NewStoreVerifications()
	tr := postgres.Transactor{Pool: db.App}

	holder, err := db.Owner.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.WithoutCancel(ctx)) }()
	_, err = holder.Exec(ctx, `SELECT 1 FROM operations WHERE id = $1 FOR UPDATE`, op.ID)
	require.NoError(t, err)
	read := make(chan error, 1)
	go func() {
		read <- tr.InTx(ctx, ws, uuid.Nil, func(ctx context.Context) error {
			_, err := tasks.Update(port.LockingOperation(ctx), task.ID, func(*domain.StoreVerification) error { return nil })
			return err
		})
	}()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE OF t, o%'`, db.Name).Scan(&n))
		return n == 1
	}, 10*time.Second, 10*time.Millisecond, "the read waits for the operation's lock")
	_, err = db.Owner.Exec(ctx, `SELECT 1 FROM store_verifications WHERE id = $1 FOR UPDATE NOWAIT`, task.ID)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe, "the task is locked while the read waits for the operation")
	require.Equal(t, postgres.CodeLockNotAvailable, pe.Code)
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-read)

	// An operation out of sight: the task alone.
	hidden := domain.NewOperation(other, uuid.Nil, "store.verify", "store", store.ID, now)
	orphan := domain.NewStoreVerification(uuid.New(), ws, hidden.ID, store, now)
	_, err = db.Owner.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id, version, created_at, updated_at)
		VALUES ($1, $2, 'store.verify', 'pending', 'store', $3, 1, now(), now())`, hidden.ID, other, store.ID)
	require.NoError(t, err)
	require.NoError(t, tr.InTx(ctx, ws, uuid.Nil, func(ctx context.Context) error { return tasks.Insert(ctx, orphan) }))
	err = tr.InTx(ctx, ws, uuid.Nil, func(ctx context.Context) error {
		got, err := tasks.Update(port.LockingOperation(ctx), orphan.ID, func(*domain.StoreVerification) error { return nil })
		require.NoError(t, err)
		require.Equal(t, orphan.ID, got.ID)
		_, err = ops.Update(ctx, hidden.ID, func(*domain.Operation) error { return nil })
		return err
	})
	require.ErrorIs(t, err, domain.ErrOperationNotFound)
	// And no task at all: the task's not-found error.
	err = tr.InTx(ctx, ws, uuid.Nil, func(ctx context.Context) error {
		_, err := tasks.Update(port.LockingOperation(ctx), uuid.New(), func(*domain.StoreVerification) error { return nil })
		return err
	})
	require.ErrorIs(t, err, domain.ErrStoreVerificationNotFound)
}
