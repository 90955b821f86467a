package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestNotifyAfterCommit: a notification registered in a transaction is sent once after the
// commit, never for a rolled-back transaction, and never from inside the transaction (a
// listener sees nothing while the transaction is still open).
func TestNotifyAfterCommit(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, db.AppURL)
	require.NoError(t, err)
	defer listener.Close(ctx)
	_, err = listener.Exec(ctx, "LISTEN test_channel")
	require.NoError(t, err)
	next := func(wait time.Duration) string {
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			return ""
		}
		return n.Payload
	}

	// Rolled back: nothing.
	err = postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, _ pgx.Tx) error {
		require.NoError(t, postgres.NotifyAfterCommit(ctx, "test_channel", "rolled-back"))
		return errors.New("roll back")
	})
	require.Error(t, err)

	// Committed: once per distinct payload, after the commit.
	err = postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, _ pgx.Tx) error {
		for range 3 {
			require.NoError(t, postgres.NotifyAfterCommit(ctx, "test_channel", "a"))
		}
		require.NoError(t, postgres.NotifyAfterCommit(ctx, "test_channel", "b"))
		require.Equal(t, "", next(200*time.Millisecond), "notified before the commit")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "a", next(5*time.Second))
	require.Equal(t, "b", next(5*time.Second))
	require.Equal(t, "", next(300*time.Millisecond), "a duplicate or the rolled-back notification arrived")

	require.ErrorIs(t, postgres.NotifyAfterCommit(ctx, "test_channel", "x"), postgres.ErrNoTx)
}
