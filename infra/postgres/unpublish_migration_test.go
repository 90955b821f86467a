package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// sql/035's Down works once a product was unpublished and published again to the same store
// (two publications that are not failed): the unpublished one is recorded failed
// (PUBLICATION_UNPUBLISHED), which the first-publication rule before 035 counts as gone.
func TestMigration035DownAfterARepublish(t *testing.T) {
	m := pgtest.MigrateTo(t, 35)
	conn := m.Conn(t)
	ctx := context.Background()
	ws, store, product, op := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	gone, live := uuid.New(), uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO workspaces (id, name) VALUES ($1, 'ws')`, []any{ws}},
		{`INSERT INTO stores (id, workspace_id, platform, shop_id, name, status) VALUES ($1, $2, 'sandbox', 'shop', 'Shop', 'verified')`, []any{store, ws}},
		{`INSERT INTO products (id, workspace_id, title, price, price_text, currency) VALUES ($1, $2, 'Mug', 10, '10.00', 'EUR')`, []any{product, ws}},
		{`INSERT INTO operations (id, workspace_id, type, resource_type, resource_id) VALUES ($1, $2, 'publication', 'publication', $3)`, []any{op, ws, gone}},
		{`INSERT INTO publications (id, workspace_id, operation_id, status, product_id, store_id, product_revision, unpublished_at)
		  VALUES ($1, $3, $4, 'succeeded', $5, $6, 1, now()), ($2, $3, $4, 'succeeded', $5, $6, 1, NULL)`, []any{gone, live, ws, op, product, store}},
	} {
		_, err := conn.Exec(ctx, q.sql, q.args...)
		require.NoError(t, err, q.sql)
	}

	m.DownTo(t, 34)

	var status, code string
	require.NoError(t, conn.QueryRow(ctx, `SELECT status, error_code FROM publications WHERE id = $1`, gone).Scan(&status, &code))
	require.Equal(t, "failed", status)
	require.Equal(t, "PUBLICATION_UNPUBLISHED", code)
	require.NoError(t, conn.QueryRow(ctx, `SELECT status FROM publications WHERE id = $1`, live).Scan(&status))
	require.Equal(t, "succeeded", status)
	m.Up(t)
}
