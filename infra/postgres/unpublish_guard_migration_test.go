package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// sql/070 marks the publications of the unpublishes accepted before it (pending), not those
// of failed ones; from then on the guard refuses a listing update of a marked publication
// PUBLICATION_UNPUBLISHED at its insert, an unpublish that fails clears the mark, and the
// migration goes down and up again.
func TestMigration070MarksPendingUnpublishesAndGuardsUpdates(t *testing.T) {
	m := pgtest.MigrateTo(t, 69)
	conn := m.Conn(t)
	ctx := context.Background()
	ws, store, product, op := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	pending, failed, unpending, unfailed := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	exec := func(sql string, args ...any) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO workspaces (id, name) VALUES ($1, 'ws')`, []any{ws}},
		{`INSERT INTO stores (id, workspace_id, platform, shop_id, name, status) VALUES ($1, $2, 'sandbox', 'shop', 'Shop', 'verified')`, []any{store, ws}},
		{`INSERT INTO products (id, workspace_id, title, price, price_text, currency) VALUES ($1, $2, 'Mug', 10, '10.00', 'EUR')`, []any{product, ws}},
		{`INSERT INTO operations (id, workspace_id, type, resource_type, resource_id) VALUES ($1, $2, 'publication', 'publication', $3)`, []any{op, ws, pending}},
		{`INSERT INTO publications (id, workspace_id, operation_id, status, product_id, store_id, product_revision, external_product_id)
		  VALUES ($1, $3, $4, 'succeeded', $5, $6, 1, 'p1'), ($2, $3, $4, 'failed', $5, $6, 1, 'p2')`, []any{pending, failed, ws, op, product, store}},
		{`INSERT INTO unpublishes (id, workspace_id, operation_id, status, publication_id, store_id, external_product_id)
		  VALUES ($1, $3, $5, 'pending', $4, $6, 'p1'), ($2, $3, $5, 'failed', $7, $6, 'p2')`, []any{unpending, unfailed, ws, pending, op, store, failed}},
	} {
		require.NoError(t, exec(q.sql, q.args...), q.sql)
	}

	m.UpTo(t, 70)

	mark := func(id uuid.UUID) *uuid.UUID {
		var u *uuid.UUID
		require.NoError(t, conn.QueryRow(ctx, `SELECT unpublish_id FROM publications WHERE id = $1`, id).Scan(&u))
		return u
	}
	require.Equal(t, &unpending, mark(pending))
	require.Nil(t, mark(failed))
	update := `INSERT INTO listing_updates (id, workspace_id, operation_id, publication_id, product_id, store_id, product_revision,
	  product_snapshot, status) VALUES ($1, $2, $3, $4, $5, $6, 1, '{"revision": 1}', 'pending')`
	err := exec(update, uuid.New(), ws, op, pending, product, store)
	require.ErrorContains(t, err, "PUBLICATION_UNPUBLISHED")
	require.ErrorContains(t, err, "LKG01")

	require.NoError(t, exec(`UPDATE unpublishes SET status = 'failed' WHERE id = $1`, unpending))
	require.Nil(t, mark(pending))
	require.NoError(t, exec(update, uuid.New(), ws, op, pending, product, store))

	m.DownTo(t, 69)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM task_guards WHERE name = 'publication not unpublished'`).Scan(&n))
	require.Zero(t, n)
	m.Up(t)
}
