package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// A pool with Statements counts every statement it sends (BEGIN, the scope, each query of a
// batch, COMMIT) and every round trip; two pools on one registry count into one series.
func TestStatementsCountsWhatThePoolSends(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	stmts, err := postgres.NewStatements(reg)
	require.NoError(t, err)
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: db.AppURL, MaxConns: 1, Statements: stmts})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	again, err := postgres.NewStatements(reg)
	require.NoError(t, err, "a second pool of the same process registers on the same registry")

	count := func() (statements, roundTrips float64) {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		byName := map[string]float64{}
		for _, mf := range mfs {
			byName[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
		}
		return byName["listing_db_statements_total"], byName["listing_db_round_trips_total"]
	}
	s0, r0 := count()
	require.NoError(t, postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: uuid.New()}, func(ctx context.Context, tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&n); err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		b.Queue(`SELECT 2`)
		b.Queue(`SELECT 3`)
		return tx.SendBatch(ctx, b).Close()
	}))
	s1, r1 := count()
	// BEGIN with the scope (one query string), SELECT 1, the batch's 3 queries and COMMIT:
	// 6 statements in 4 round trips.
	require.Equal(t, 6.0, s1-s0, "statements")
	require.Equal(t, 4.0, r1-r0, "round trips")

	other, err := postgres.Connect(ctx, postgres.PoolConfig{URL: db.AppURL, MaxConns: 1, Statements: again})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	_, err = other.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	s2, _ := count()
	require.Equal(t, 1.0, s2-s1, "the second pool counts into the same series")
}
