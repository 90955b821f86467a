package postgres_test

import (
	"context"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/sql"
)

// catalogue describes the public schema as a migration leaves it, one line per object: the
// tables (and their row security and privileges), columns, constraints, indexes, policies,
// triggers and functions, and the rows of the engine's registries (task_tables,
// task_guards) when they exist.
const catalogue = `
SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' rls=' || c.relrowsecurity || '/' || c.relforcerowsecurity
       || ' acl=' || coalesce(c.relacl::text, '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'i')
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' notnull=' || a.attnotnull || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
       || ' acl=' || coalesce(a.attacl::text, '')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v') AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint ' || c.relname || '.' || k.conname || ' ' || pg_get_constraintdef(k.oid)
  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = 'public'
UNION ALL
SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
UNION ALL
SELECT 'policy ' || c.relname || '.' || p.polname || ' ' || p.polcmd::text || ' roles=' || p.polroles::text
       || ' using=' || coalesce(pg_get_expr(p.polqual, p.polrelid), '')
       || ' check=' || coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '')
  FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
UNION ALL
SELECT 'trigger ' || c.relname || '.' || t.tgname || ' ' || t.tgfoid::regproc::text
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = 'public' AND NOT t.tgisinternal
UNION ALL
SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') definer=' || p.prosecdef
       || ' acl=' || coalesce(p.proacl::text, '') || ' src=' || md5(p.prosrc)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'`

// snapshot is the catalogue of the database conn is connected to, with the registries' rows.
func snapshot(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, catalogue)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, registry := range []string{"task_tables", "task_guards"} {
		var exists bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "public."+registry).Scan(&exists))
		if !exists {
			continue
		}
		rows, err := conn.Query(ctx, `SELECT '`+registry+` ' || (to_jsonb(r) - 'created_at')::text FROM `+registry+` r`)
		require.NoError(t, err)
		more, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		lines = append(lines, more...)
	}
	return lines
}

// taskTableMigrations are the versions of the migrations that create a task table (a CREATE
// TABLE and a call of prepare_task_table in their Up), after the engine's own (026).
func taskTableMigrations(t *testing.T) []int64 {
	t.Helper()
	files, err := fs.Glob(sql.Migrations, "*.sql")
	require.NoError(t, err)
	name := regexp.MustCompile(`^(\d+)_`)
	var versions []int64
	for _, f := range files {
		m := name.FindStringSubmatch(f)
		if m == nil {
			continue
		}
		v, err := strconv.ParseInt(m[1], 10, 64)
		require.NoError(t, err)
		body, err := fs.ReadFile(sql.Migrations, f)
		require.NoError(t, err)
		up, _, _ := cutDown(string(body))
		if v > 26 && regexp.MustCompile(`(?i)CREATE TABLE`).MatchString(up) &&
			regexp.MustCompile(`SELECT prepare_task_table\(`).MatchString(up) {
			versions = append(versions, v)
		}
	}
	return versions
}

// missing returns the lines of want that got lacks.
func missing(got, want []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}

// cutDown splits a goose migration at its Down marker.
func cutDown(body string) (up, down string, found bool) {
	i := regexp.MustCompile(`(?m)^-- \+goose Down`).FindStringIndex(body)
	if i == nil {
		return body, "", false
	}
	return body[:i[0]], body[i[1]:], true
}

// The Down of every migration that creates a task table undoes its Up: the schema (tables,
// columns, constraints, indexes, policies, triggers, functions, privileges) and the engine's
// registries (task_tables, task_guards) after Up then Down are what they were before Up.
func TestTaskTableMigrationsDownUndoUp(t *testing.T) {
	versions := taskTableMigrations(t)
	require.NotEmpty(t, versions)
	m := pgtest.MigrateTo(t, versions[0]-1)
	conn := m.Conn(t)
	for _, v := range versions {
		m.UpTo(t, v-1)
		before := snapshot(t, conn)
		m.UpTo(t, v)
		m.DownTo(t, v-1)
		after := snapshot(t, conn)
		require.Empty(t, missing(after, before), "migration %03d: after its Up and Down, these are gone", v)
		require.Empty(t, missing(before, after), "migration %03d: after its Up and Down, these are new", v)
		m.UpTo(t, v)
	}
}
