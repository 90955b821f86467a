package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// InTx opens a READ COMMITTED transaction scoped to its workspace and user (or to none),
// rolls it back when fn fails, and leaves nothing of the scope on the pooled connection.
func TestInTxScopesTheTransactionOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	pool := db.SingleConnApp(t) // every call below uses the same connection

	settings := func(ctx context.Context, tx pgx.Tx) (ws, user, iso string) {
		require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(current_setting('app.workspace_id', true), ''),
			coalesce(current_setting('app.user_id', true), ''), current_setting('transaction_isolation')`).Scan(&ws, &user, &iso))
		return ws, user, iso
	}
	ws, user := uuid.New(), uuid.New()
	for _, scope := range []postgres.Scope{{WorkspaceID: ws, UserID: user}, {UserID: user}, {}} {
		require.NoError(t, postgres.InTx(ctx, pool, scope, func(ctx context.Context, tx pgx.Tx) error {
			gotWS, gotUser, iso := settings(ctx, tx)
			want := func(id uuid.UUID) string {
				if id == uuid.Nil {
					return ""
				}
				return id.String()
			}
			require.Equal(t, want(scope.WorkspaceID), gotWS)
			require.Equal(t, want(scope.UserID), gotUser)
			require.Equal(t, "read committed", iso)
			return nil
		}))
		var left string
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(current_setting('app.workspace_id', true), '') ||
			coalesce(current_setting('app.user_id', true), '')`).Scan(&left))
		require.Empty(t, left, "the scope outlived its transaction")
	}

	boom := errors.New("boom")
	err := postgres.InTx(ctx, pool, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TEMP TABLE intx_probe (x int)`)
		require.NoError(t, err)
		return boom
	})
	require.ErrorIs(t, err, boom)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = 'intx_probe'`).Scan(&n))
	require.Zero(t, n, "rolled back")
}

// AfterCommit hooks run once the commit has returned, once per key, and never when fn fails
// or the commit fails.
func TestAfterCommit(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	require.ErrorIs(t, postgres.AfterCommit(ctx, nil, func() {}), postgres.ErrNoTx)

	var ran []string
	hook := func(name string) func() { return func() { ran = append(ran, name) } }
	require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, postgres.AfterCommit(ctx, "k", hook("first")))
		require.NoError(t, postgres.AfterCommit(ctx, "k", hook("duplicate")))
		require.NoError(t, postgres.AfterCommit(ctx, nil, hook("unkeyed")))
		require.Empty(t, ran, "a hook ran before the commit")
		return nil
	}))
	require.Equal(t, []string{"first", "unkeyed"}, ran)

	ran = nil
	boom := errors.New("boom")
	err := postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, postgres.AfterCommit(ctx, nil, hook("rolled back")))
		return boom
	})
	require.ErrorIs(t, err, boom)
	// A commit that fails: a deferred constraint violated at commit time.
	err = postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, postgres.AfterCommit(ctx, nil, hook("failed commit")))
		_, err := tx.Exec(ctx, `CREATE TEMP TABLE after_commit_probe (x int UNIQUE DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP;
			INSERT INTO after_commit_probe VALUES (1), (1)`)
		return err
	})
	require.Error(t, err)
	require.Empty(t, ran)
}

// BeforeCommit statements run with the COMMIT, in order; one that fails rolls the whole
// transaction back and InTx returns its error through onErr; the connection goes back to the
// pool outside any transaction.
func TestBeforeCommit(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	pool := db.SingleConnApp(t) // every call below uses the same connection
	require.ErrorIs(t, postgres.BeforeCommit(ctx, nil, `SELECT 1`), postgres.ErrNoTx)
	_, err := db.Owner.Exec(ctx, `CREATE TABLE before_commit_probe (x int PRIMARY KEY); GRANT ALL ON before_commit_probe TO app_user`)
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM before_commit_probe`).Scan(&n))
		return n
	}

	require.NoError(t, postgres.InTx(ctx, pool, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO before_commit_probe VALUES (1)`)
		require.NoError(t, err)
		require.NoError(t, postgres.BeforeCommit(ctx, nil, `INSERT INTO before_commit_probe VALUES ($1)`, 2))
		require.NoError(t, postgres.BeforeCommit(ctx, nil, `UPDATE before_commit_probe SET x = x + 10 WHERE x = 2`))
		return nil
	}))
	var xs []int
	rows, err := db.Owner.Query(ctx, `SELECT x FROM before_commit_probe ORDER BY x`)
	require.NoError(t, err)
	xs, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{1, 12}, xs)

	named := errors.New("named")
	hooked := false
	err = postgres.InTx(ctx, pool, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO before_commit_probe VALUES (3)`)
		require.NoError(t, err)
		require.NoError(t, postgres.AfterCommit(ctx, nil, func() { hooked = true }))
		require.NoError(t, postgres.BeforeCommit(ctx, func(err error) error { return errors.Join(named, err) },
			`INSERT INTO before_commit_probe VALUES (1)`)) // duplicate key
		return nil
	})
	require.ErrorIs(t, err, named)
	require.False(t, hooked)
	require.Equal(t, 2, count(), "the failed transaction kept nothing")
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT 'idle'`).Scan(&status), "the connection came back usable")
}

// batchRecorder records the statements of the batches a pool sends.
type batchRecorder struct {
	mu    sync.Mutex
	stmts []string
}

func (*batchRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (*batchRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *batchRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range d.Batch.QueuedQueries {
		r.stmts = append(r.stmts, q.SQL)
	}
	return ctx
}
func (*batchRecorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*batchRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// Writes queued with BeforeCommitWrite on distinct tables travel as one statement with the
// COMMIT and all take effect; when the server refuses one of them, the transaction rolls
// back and the error goes through that write's onErr.
func TestBeforeCommitWrite(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Owner.Exec(ctx, `CREATE TABLE bcw_a (x int PRIMARY KEY, n int NOT NULL DEFAULT 0);
		CREATE TABLE bcw_b (x int PRIMARY KEY);
		INSERT INTO bcw_a VALUES (1, 0);
		GRANT ALL ON bcw_a, bcw_b TO app_user`)
	require.NoError(t, err)
	rec := &batchRecorder{}
	pool := tracedPool(ctx, t, db, 1, rec)
	nameA := errors.New("a")
	nameB := errors.New("b")
	onA := func(err error) error { return errors.Join(nameA, err) }
	onB := func(err error) error { return errors.Join(nameB, err) }

	require.NoError(t, postgres.InTx(ctx, pool, postgres.Scope{}, func(ctx context.Context, _ pgx.Tx) error {
		require.NoError(t, postgres.BeforeCommitWrite(ctx, "bcw_a", onA, `UPDATE bcw_a SET n = n + $2 WHERE x = $1`, 1, 5))
		return postgres.BeforeCommitWrite(ctx, "bcw_b", onB, `INSERT INTO bcw_b VALUES ($1)`, 7)
	}))
	require.Equal(t, []string{`WITH w1 AS (UPDATE bcw_a SET n = n + $2 WHERE x = $1) INSERT INTO bcw_b VALUES ($3)`, "COMMIT"}, rec.stmts)
	var n, b int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT (SELECT n FROM bcw_a WHERE x = 1), (SELECT count(*) FROM bcw_b)`).Scan(&n, &b))
	require.Equal(t, 5, n)
	require.Equal(t, 1, b)

	hooked := false
	err = postgres.InTx(ctx, pool, postgres.Scope{}, func(ctx context.Context, _ pgx.Tx) error {
		require.NoError(t, postgres.AfterCommit(ctx, nil, func() { hooked = true }))
		require.NoError(t, postgres.BeforeCommitWrite(ctx, "bcw_a", onA, `UPDATE bcw_a SET n = n + $2 WHERE x = $1`, 1, 5))
		return postgres.BeforeCommitWrite(ctx, "bcw_b", onB, `INSERT INTO bcw_b VALUES ($1)`, 7) // duplicate key
	})
	require.ErrorIs(t, err, nameB)
	require.NotErrorIs(t, err, nameA)
	require.ErrorIs(t, err, domain.ErrConflict)
	require.False(t, hooked)
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT n FROM bcw_a WHERE x = 1`).Scan(&n))
	require.Equal(t, 5, n, "rolled back")
}
