package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

type openingKey struct{}

// An Opening runs in its invocation's transaction, under its scope, before the chain; what
// its Read returned is what Opened gives the chain; when it fails, or the chain does, nothing
// of the transaction stays; the transaction it begins behaves as pgx's (savepoints,
// BeforeCommit, a closed transaction refuses statements).
func TestTxMiddlewareOpening(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	pool := db.SingleConnApp(t) // every call below uses the same connection

	// The opening sets a session setting: it survives its transaction only if that commits.
	const openSQL = `SELECT set_config('test.opened', $1, false), current_setting('app.workspace_id'),
		current_setting('transaction_isolation'), txid_current()`
	type seen struct {
		ws, iso string
		txid    int64
	}
	opening := func(value string, readErr error) postgres.Opener {
		return func(context.Context, bus.Invocation) []*postgres.Opening {
			return []*postgres.Opening{{Key: openingKey{}, SQL: openSQL, Args: []any{value},
				Read: func(rows pgx.Rows) (any, error) {
					var s seen
					var set string
					if !rows.Next() {
						return nil, errors.New("no row")
					}
					if err := rows.Scan(&set, &s.ws, &s.iso, &s.txid); err != nil {
						return nil, err
					}
					return s, readErr
				}}}
		}
	}
	left := func() string {
		var v string
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(current_setting('test.opened', true), '')`).Scan(&v))
		return v
	}
	ws := uuid.New()
	inv := bus.Invocation{Name: "test", Actor: bus.Actor{WorkspaceID: ws, UserID: uuid.New()}}

	// Committed: the chain sees the opening's result, in the same transaction.
	_, err := postgres.TxMiddleware(pool, opening("committed", nil))(ctx, inv, func(ctx context.Context) (bus.Outcome, error) {
		v, ok := postgres.Opened(ctx, openingKey{})
		require.True(t, ok)
		s := v.(seen)
		require.Equal(t, ws.String(), s.ws)
		require.Equal(t, "read committed", s.iso)
		tx, _, err := postgres.TxFromContext(ctx)
		require.NoError(t, err)
		var txid int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&txid))
		require.Equal(t, s.txid, txid, "the opening ran in another transaction")

		// A savepoint rolled back undoes what followed it only.
		sp, err := tx.Begin(ctx)
		require.NoError(t, err)
		_, err = sp.Exec(ctx, `SELECT set_config('test.opened', 'inside the savepoint', false)`)
		require.NoError(t, err)
		require.NoError(t, sp.Rollback(ctx))
		require.ErrorIs(t, sp.Rollback(ctx), pgx.ErrTxClosed)
		_, err = sp.Exec(ctx, `SELECT 1`)
		require.ErrorIs(t, err, pgx.ErrTxClosed, "a savepoint that ended still took a statement")
		// A savepoint inside one ends with it.
		outer, err := tx.Begin(ctx)
		require.NoError(t, err)
		inner, err := outer.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, outer.Commit(ctx))
		require.ErrorIs(t, inner.Commit(ctx), pgx.ErrTxClosed)
		require.NoError(t, postgres.BeforeCommit(ctx, nil, `SELECT set_config('test.before_commit', 'yes', false)`))
		return bus.Outcome{}, nil
	})
	require.NoError(t, err)
	require.Equal(t, "committed", left())
	var beforeCommit string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('test.before_commit')`).Scan(&beforeCommit))
	require.Equal(t, "yes", beforeCommit)

	// Without an opening, Opened says so.
	_, err = postgres.TxMiddleware(pool)(ctx, inv, func(ctx context.Context) (bus.Outcome, error) {
		_, ok := postgres.Opened(ctx, openingKey{})
		require.False(t, ok)
		return bus.Outcome{}, nil
	})
	require.NoError(t, err)

	// The chain fails: the opening is rolled back with the rest.
	boom := errors.New("boom")
	_, err = postgres.TxMiddleware(pool, opening("chain failed", nil))(ctx, inv, func(ctx context.Context) (bus.Outcome, error) {
		return bus.Outcome{}, boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, "committed", left())

	// The opening's Read fails, or its statement does: the chain does not run, nothing stays,
	// and the connection is back in the pool outside any transaction.
	called := false
	chain := func(context.Context) (bus.Outcome, error) { called = true; return bus.Outcome{}, nil }
	_, err = postgres.TxMiddleware(pool, opening("read failed", boom))(ctx, inv, chain)
	require.ErrorIs(t, err, boom)
	failing := func(context.Context, bus.Invocation) []*postgres.Opening {
		return []*postgres.Opening{{Key: openingKey{}, SQL: `SELECT 1 / 0`,
			Read:  func(pgx.Rows) (any, error) { return nil, nil },
			OnErr: func(err error) error { return errors.Join(errors.New("the opening failed"), err) }}}
	}
	_, err = postgres.TxMiddleware(pool, failing)(ctx, inv, chain)
	require.ErrorContains(t, err, "the opening failed")
	require.False(t, called)
	require.Equal(t, "committed", left())
}
