package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestLoginLimitsRowsOfOneAccount: app_user sees the login limits' rows of the account its
// transaction names only, and none without one; the sweep keeps what still counts.
func TestLoginLimitsRowsOfOneAccount(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	store := postgres.LoginLimits{Pool: db.App}
	a, b := sha256.Sum256([]byte("a@example.com")), sha256.Sum256([]byte("b@example.com"))
	now := time.Now()
	admit := func(port.LoginCounts) port.LoginDecision {
		return port.LoginDecision{Admit: true, NextTurn: now.Add(time.Second)}
	}
	id, err := store.Admit(ctx, a[:], "192.0.2.1", false, now, now.Add(-time.Minute), admit)
	require.NoError(t, err)
	require.Positive(t, id)
	require.NoError(t, store.Remember(ctx, a[:], "192.0.2.1", b[:], now))

	visible := func(account []byte) (n int) {
		err := pgx.BeginFunc(ctx, db.App, func(tx pgx.Tx) error {
			if account != nil {
				if _, err := tx.Exec(ctx, `SELECT set_config('app.login_account', $1, true)`, hex.EncodeToString(account)); err != nil {
					return err
				}
			}
			return tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM login_failures) + (SELECT count(*) FROM login_turns)
				+ (SELECT count(*) FROM login_known_clients) + (SELECT count(*) FROM login_devices)`).Scan(&n)
		})
		require.NoError(t, err)
		return n
	}
	require.Zero(t, visible(nil), "no account named: no rows")
	require.Zero(t, visible(b[:]), "another account's rows are not visible")
	require.Equal(t, 4, visible(a[:]))
	_, err = db.App.Exec(ctx, `INSERT INTO login_failures (account, client, failed_at) VALUES ($1, 'x', now())`, b[:])
	require.Error(t, err, "nor written without naming it")

	require.NoError(t, store.Sweep(ctx, time.Nanosecond, time.Nanosecond, 100))
	require.Equal(t, 4, visible(a[:]), "the sweep keeps failures younger than 15 minutes and clients younger than a day")
	known, device, err := store.Known(ctx, a[:], "192.0.2.1", b[:], now.Add(-time.Hour))
	require.NoError(t, err)
	require.True(t, known)
	require.True(t, device)
	require.NoError(t, store.Uncount(ctx, a[:], id))
	require.Equal(t, 3, visible(a[:]))
}
