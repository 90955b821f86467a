package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// workspaceTables lists, from the catalog, every table of the public schema with a
// workspace_id column, plus workspaces itself.
func workspaceTables(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.Owner.Query(context.Background(), `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		  AND (c.relname = 'workspaces' OR EXISTS (
		    SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'workspace_id' AND NOT a.attisdropped))
		ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, names, "outbox_events")
	require.Contains(t, names, "idempotency_requests")
	return names
}

// accountTables are the tables of accounts and sessions: scoped to one user, not to a workspace.
var accountTables = []string{"users", "refresh_token_families", "refresh_tokens"}

// appTables lists, from the catalog, every table of the public schema on which app_user holds
// any privilege.
func appTables(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.Owner.Query(context.Background(), `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
		  AND has_table_privilege('app_user', c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
		ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// Every table app_user may touch (workspace data, accounts and sessions alike) has RLS
// enabled, forced and at least one policy.
func TestRLSAuditFromCatalog(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	var super, bypass bool
	require.NoError(t, db.App.QueryRow(ctx,
		`SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user`).Scan(&super, &bypass))
	require.False(t, super, "app_user must not be a superuser")
	require.False(t, bypass, "app_user must not bypass RLS")

	tables := appTables(t, db)
	require.Subset(t, tables, workspaceTables(t, db))
	require.Subset(t, tables, accountTables)
	for _, table := range tables {
		var enabled, forced bool
		var policies int
		require.NoError(t, db.Owner.QueryRow(ctx, `
			SELECT c.relrowsecurity, c.relforcerowsecurity,
			       (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)
			FROM pg_class c WHERE c.oid = ('public.' || $1)::regclass`, table).Scan(&enabled, &forced, &policies))
		require.True(t, enabled, "%s: RLS not enabled", table)
		require.True(t, forced, "%s: RLS not forced", table)
		require.Positive(t, policies, "%s: no policy", table)
	}

	// Partitions are reached through their parent only (its policies apply): no role of the
	// service holds a privilege on one.
	var reachable []string
	rows, err := db.Owner.Query(ctx, `
		SELECT c.relname || ':' || r.rolname FROM pg_class c CROSS JOIN pg_roles r
		WHERE c.relispartition AND c.relnamespace = 'public'::regnamespace
		  AND r.rolname IN ('app_user', 'listing_operator', 'listing_inspector', 'listing_discovery')
		  AND has_table_privilege(r.oid, c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')`)
	require.NoError(t, err)
	reachable, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, reachable)
	var partitions int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relispartition`).Scan(&partitions))
	require.Positive(t, partitions)
}

// seedWorkspace creates a user and a workspace with one row in every workspace table the
// foundation defines, as the owner (RLS does not apply), and returns the workspace id.
func seedWorkspace(t *testing.T, db *pgtest.DB) (ws, user uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	ws, user = uuid.New(), uuid.New()
	_, err := db.Owner.Exec(ctx, `
		WITH u AS (INSERT INTO users (id, email, password_hash) VALUES ($2, $3, 'x')),
		     w AS (INSERT INTO workspaces (id, name) VALUES ($1, 'ws'))
		SELECT 1`, ws, user, user.String()+"@example.test")
	require.NoError(t, err)
	_, err = db.Owner.Exec(ctx, `
		WITH m AS (INSERT INTO workspace_memberships (workspace_id, user_id, role) VALUES ($1, $2, 'owner')),
		     i AS (INSERT INTO idempotency_requests (id, workspace_id, user_id, method, path, idempotency_key,
		             request_fingerprint, fingerprint_key_id, status)
		           VALUES (gen_random_uuid(), $1, $2, 'POST', '/x', gen_random_uuid(), '\x00', 'k1', 'completed')),
		     o AS (INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload)
		           VALUES (gen_random_uuid(), $1, 'test.happened', 'test', 'test', 'a', '{}')),
		     l AS (INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
		                                          event_payload, metadata, attempt_count, created_at, dispatched_at)
		           VALUES (gen_random_uuid(), $1, 'test.happened', 'test', 'test', 'a', '{}', '{}', 0, now(), now())),
		     p AS (INSERT INTO operations (id, workspace_id, type, resource_type, resource_id)
		           VALUES (gen_random_uuid(), $1, 'test', 'test', gen_random_uuid()))
		SELECT 1`, ws, user)
	require.NoError(t, err)
	return ws, user
}

// appMay says whether app_user holds privilege priv on table.
func appMay(t *testing.T, db *pgtest.DB, table, priv string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.Owner.QueryRow(context.Background(), `SELECT has_table_privilege('app_user', ('public.' || $1)::regclass, $2)`,
		table, priv).Scan(&ok))
	return ok
}

func TestRLSNoContextSeesNothingAndWritesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ws, _ := seedWorkspace(t, db)

	for _, table := range workspaceTables(t, db) {
		var n int
		err := postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n)
		})
		require.NoError(t, err, table)
		require.Zero(t, n, "%s: rows visible without a workspace context", table)

		// Updates and deletes touch nothing.
		col := "workspace_id"
		if table == "workspaces" {
			col = "id"
		}
		if !appMay(t, db, table, "UPDATE") {
			continue // insert-only (the log of dispatched events): no update, no delete
		}
		err = postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, "UPDATE "+pgx.Identifier{table}.Sanitize()+" SET "+col+" = "+col)
			if err != nil {
				return err
			}
			require.Zero(t, tag.RowsAffected(), "%s: update without context", table)
			tag, err = tx.Exec(ctx, "DELETE FROM "+pgx.Identifier{table}.Sanitize())
			require.Zero(t, tag.RowsAffected(), "%s: delete without context", table)
			return err
		})
		require.NoError(t, err, table)
	}

	// Inserts are refused.
	err := postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload)
			VALUES (gen_random_uuid(), $1, 't', 't', 't', 'a', '{}')`, ws)
		return postgres.TranslateError(err)
	})
	require.ErrorIs(t, err, domain.ErrForbidden)
	err = postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES (gen_random_uuid(), 'x')`)
		return postgres.TranslateError(err)
	})
	require.ErrorIs(t, err, domain.ErrForbidden)

	var total int
	require.NoError(t, db.Owner.QueryRow(ctx, "SELECT count(*) FROM outbox_events").Scan(&total))
	require.Equal(t, 1, total)
}

func TestRLSWorkspaceIsolation(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	a, _ := seedWorkspace(t, db)
	b, _ := seedWorkspace(t, db)

	for _, table := range workspaceTables(t, db) {
		col := "workspace_id"
		if table == "workspaces" {
			col = "id"
		}
		q := "SELECT count(*) FILTER (WHERE " + col + " = $1), count(*) FILTER (WHERE " + col + " = $2) FROM " + pgx.Identifier{table}.Sanitize()
		var ownTotal, otherTotal int
		require.NoError(t, db.Owner.QueryRow(ctx, q, a, b).Scan(&ownTotal, &otherTotal))
		err := postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: a}, func(ctx context.Context, tx pgx.Tx) error {
			var own, other int
			if err := tx.QueryRow(ctx, q, a, b).Scan(&own, &other); err != nil {
				return err
			}
			require.Equal(t, ownTotal, own, "%s: own rows", table)
			require.Zero(t, other, "%s: other workspace's rows visible", table)
			if !appMay(t, db, table, "DELETE") {
				return nil
			}
			tag, err := tx.Exec(ctx, "DELETE FROM "+pgx.Identifier{table}.Sanitize()+" WHERE "+col+" = $1", b)
			require.Zero(t, tag.RowsAffected(), "%s: deleted another workspace's rows", table)
			return err
		})
		require.NoError(t, err, table)
	}
	// Writing a row into B from A's context is refused.
	err := postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: a}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, resource_type, resource_id)
			VALUES (gen_random_uuid(), $1, 't', 't', gen_random_uuid())`, b)
		return postgres.TranslateError(err)
	})
	require.ErrorIs(t, err, domain.ErrForbidden)
	// Moving A's row into B is refused.
	err = postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: a}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE operations SET workspace_id = $1`, b)
		return postgres.TranslateError(err)
	})
	require.ErrorIs(t, err, domain.ErrForbidden)
}

func TestDiscoveryFunctionsReturnIDsOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ws, _ := seedWorkspace(t, db)

	var got []uuid.UUID
	err := postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT workspace_id FROM outbox_due_workspaces(now(), 100)")
		if err != nil {
			return err
		}
		got, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		return err
	})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ws}, got)

	// app_user cannot become the discovery role, nor read through it.
	_, err = db.App.Exec(ctx, "SET ROLE listing_discovery")
	require.Error(t, err)
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t) // already migrated from the template
	results, err := postgres.Migrate(context.Background(), db.OwnerURL, false)
	require.NoError(t, err)
	require.Empty(t, results)
}

func TestMigrateEmptyDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	fresh := "listing_fresh_" + uuid.NewString()[:8]
	url := replaceDB(t, db.OwnerURL, fresh)
	t.Cleanup(func() {
		_, _ = db.Owner.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{fresh}.Sanitize()+" WITH (FORCE)")
	})

	results, err := postgres.Migrate(ctx, url, true)
	require.NoError(t, err)
	require.NotEmpty(t, results)
	again, err := postgres.Migrate(ctx, url, true)
	require.NoError(t, err)
	require.Empty(t, again)
}

func replaceDB(t *testing.T, url, name string) string {
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	return "postgres://" + cfg.User + "@" + cfg.Host + ":5432/" + name + "?sslmode=disable"
}
