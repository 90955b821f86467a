package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestTranslateErrorUnstorableInput: every SQLSTATE that means "this value cannot be
// stored" becomes the 400-class INVALID_INPUT, keeps the original for logs, and shows no SQL.
func TestTranslateErrorUnstorableInput(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"22001", "22021", "22P02", "22P05", "23514"} {
		pgErr := &pgconn.PgError{Code: code, Message: "SELECT secret FROM somewhere"}
		err := postgres.TranslateError(pgErr)
		var de *domain.Error
		require.True(t, errors.As(err, &de), code)
		require.Equal(t, "INVALID_INPUT", de.Code, code)
		require.Equal(t, domain.KindInvalid, de.Kind, code)
		require.NotContains(t, de.Message, "SELECT", code)
		require.ErrorAs(t, err, &pgErr, "%s: the original stays reachable", code)
	}

	// The same from a real server.
	db := pgtest.New(t)
	ctx := context.Background()
	tx, err := db.Owner.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	for name, stmt := range map[string]struct {
		sql  string
		args []any
	}{
		"NUL in text":      {`SELECT $1::text`, []any{"a\x00b"}},
		"not a uuid":       {`SELECT $1::text::uuid`, []any{"mug"}},
		"check constraint": {`INSERT INTO workspaces (id, name) VALUES (gen_random_uuid(), '')`, nil},
	} {
		_, err := tx.Exec(ctx, "SAVEPOINT s")
		require.NoError(t, err)
		_, err = tx.Exec(ctx, stmt.sql, stmt.args...)
		require.Error(t, err, name)
		err = postgres.TranslateError(err)
		require.ErrorIs(t, err, domain.ErrUnstorableInput, "%s: %v", name, err)
		var de *domain.Error
		require.True(t, errors.As(err, &de))
		require.False(t, strings.Contains(de.Message, "SELECT") || strings.Contains(de.Message, "INSERT"), name)
		_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s")
		require.NoError(t, err)
	}
}
