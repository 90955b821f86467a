package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// sqlColumns returns the columns of table.
func sqlColumns(t *testing.T, db *pgtest.DB, table string) []string {
	t.Helper()
	rows, err := db.Owner.Query(context.Background(),
		`SELECT column_name::text FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1`, table)
	require.NoError(t, err)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return cols
}

// taskTables returns the tables of task_tables, sorted.
func taskTables(t *testing.T, db *pgtest.DB) []string {
	t.Helper()
	rows, err := db.Owner.Query(context.Background(), `SELECT table_name FROM task_tables ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return tables
}

// lifecycleColumns returns the lifecycle columns (postgres.LifecycleColumns) table lacks.
func lifecycleColumns(t *testing.T, db *pgtest.DB, table string) (missing []string) {
	t.Helper()
	cols := sqlColumns(t, db, table)
	for _, c := range postgres.LifecycleColumns() {
		if !slices.Contains(cols, c) {
			missing = append(missing, c)
		}
	}
	return missing
}

// Every registered flow's task table is in the engine's registry of task tables
// (task_tables, which stuck-task discovery reads) and has the lifecycle columns; and every
// table of that registry belongs to a flow.
func TestTaskTablesAreTheFlows(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	registered := taskTables(t, db)
	var tables []string
	for _, f := range flows.All() {
		tables = append(tables, f.Table)
		require.Contains(t, registered, f.Table, "flow %s: its table is not a task table (prepare_task_table)", f.Name)
		require.Empty(t, lifecycleColumns(t, db, f.Table), "flow %s: table %s lacks lifecycle columns", f.Name, f.Table)
	}
	slices.Sort(tables)
	require.Equal(t, tables, registered, "task_tables holds a table no flow declares")
}

// Every flow whose tasks are served under their parent (Spec.Resource) has the list index
// those routes read (prepare_task_table(table, list_by)).
func TestTaskResourcesHaveAListIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for _, f := range flows.All() {
		r := f.Resource
		if r == nil {
			continue
		}
		var def string
		err := db.Owner.QueryRow(context.Background(), `SELECT indexdef FROM pg_indexes WHERE indexname = $1`, f.Table+"_list").Scan(&def)
		require.NoError(t, err, "flow %s: no list index %s_list (prepare_task_table(table, list_by))", f.Name, f.Table)
		require.Contains(t, def, "(workspace_id, "+r.ParentParam()+", created_at DESC, id DESC)", "flow %s: its list index", f.Name)
	}
}

// Go and SQL agree on every task table's columns: the columns of each table of task_tables
// are those its repository maps (the lifecycle columns, then the flow's own), no more, no
// fewer; and every task repository's table is in task_tables.
func TestTaskTableColumns(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	registered := taskTables(t, db)
	mapped := postgres.TaskTableColumns()
	for _, table := range registered {
		goCols, ok := mapped[table]
		require.True(t, ok, "task table %s has no repository mapping its columns", table)
		require.ElementsMatch(t, goCols, sqlColumns(t, db, table), "task table %s: the repository's columns (first) against the table's", table)
	}
	for table := range mapped {
		require.Contains(t, registered, table, "repository of %s: not a task table (prepare_task_table)", table)
	}
}

// prepare_task_table turns a table of domain columns into a task table: lifecycle columns,
// forced RLS and its policy, the unfinished index, discovery's grant and policy, and a row in
// task_tables that stuck_task_workspaces reads (and whose trigger adds the failed index and
// the operators' inspector policy). It refuses a lifecycle column of another
// type, and only the tables' owner may run it.
func TestPrepareTaskTable(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ws, _ := seedWorkspace(t, db)

	tx, err := db.Owner.Begin(ctx)
	require.NoError(t, err)
	for _, stmt := range []string{`SET LOCAL ROLE listing_owner`,
		`CREATE TABLE demo_tasks (note text NOT NULL DEFAULT '')`,
		`SELECT prepare_task_table('demo_tasks')`,
		`SELECT prepare_task_table('demo_tasks')`, // idempotent
	} {
		_, err = tx.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, tx.Commit(ctx))
	require.Empty(t, lifecycleColumns(t, db, "demo_tasks"))

	var forced bool
	var policies, indexes int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT relforcerowsecurity,
		  (SELECT count(*) FROM pg_policy WHERE polrelid = c.oid
		     AND polname IN ('demo_tasks_tenant', 'demo_tasks_discovery', 'demo_tasks_inspector')),
		  (SELECT count(*) FROM pg_indexes WHERE indexname IN ('demo_tasks_unfinished', 'demo_tasks_failed', 'demo_tasks_operation'))
		FROM pg_class c WHERE oid = 'demo_tasks'::regclass`).Scan(&forced, &policies, &indexes))
	require.True(t, forced)
	require.Equal(t, 3, policies, "tenant, discovery and the operators' inspector (sql/039's trigger on task_tables)")
	require.Equal(t, 3, indexes, "unfinished, failed for the operators' failures page, and by operation for cancelling (sql/056's trigger)")

	// A task left unfinished is found by discovery; app_user sees only its workspace's rows.
	_, err = db.Owner.Exec(ctx, `WITH o AS (INSERT INTO operations (id, workspace_id, type, resource_type, resource_id)
		  VALUES (gen_random_uuid(), $1, 'demo', 'demo', gen_random_uuid()) RETURNING id)
		INSERT INTO demo_tasks (id, workspace_id, operation_id, status, updated_at)
		SELECT gen_random_uuid(), $1, o.id, 'running', now() - interval '1 hour' FROM o`, ws)
	require.NoError(t, err)
	var found []uuid.UUID
	rows, err := db.App.Query(ctx, `SELECT workspace_id FROM stuck_task_workspaces($1, 10)`, time.Now().Add(-time.Minute))
	require.NoError(t, err)
	found, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ws}, found)
	var n int
	require.NoError(t, db.App.QueryRow(ctx, `SELECT count(*) FROM demo_tasks`).Scan(&n))
	require.Zero(t, n, "no workspace context: RLS hides the row")
	_, err = db.Owner.Exec(ctx, `UPDATE demo_tasks SET status = 'cancelled'`)
	require.NoError(t, err, "a new task table's status allows cancelled")
	_, err = db.Owner.Exec(ctx, `UPDATE demo_tasks SET status = 'lost'`)
	require.ErrorContains(t, err, "violates check constraint")

	// A lifecycle column of another type is refused, naming it.
	tx, err = db.Owner.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL ROLE listing_owner; CREATE TABLE bad_tasks (status int)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT prepare_task_table('bad_tasks')`)
	require.ErrorContains(t, err, "task table bad_tasks: column status is integer")
	require.NoError(t, tx.Rollback(ctx))

	// app_user can neither prepare a table nor read the registry.
	_, err = db.App.Exec(ctx, `SELECT prepare_task_table('demo_tasks')`)
	require.ErrorContains(t, err, "permission denied")
	_, err = db.App.Exec(ctx, `SELECT count(*) FROM task_tables`)
	require.ErrorContains(t, err, "permission denied")
}

// prepare_task_table(table, list_by) adds the list index of the tasks under their parent, and
// drop_task_table undoes a flow's task table: its guards, its row in task_tables, the table.
func TestPrepareTaskTableListAndDrop(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	exec := func(stmts ...string) {
		t.Helper()
		tx, err := db.Owner.Begin(ctx)
		require.NoError(t, err)
		for _, stmt := range append([]string{`SET LOCAL ROLE listing_owner`}, stmts...) {
			_, err = tx.Exec(ctx, stmt)
			require.NoError(t, err, stmt)
		}
		require.NoError(t, tx.Commit(ctx))
	}
	exec(`CREATE TABLE demo_children (parent_id uuid NOT NULL)`,
		`SELECT prepare_task_table('demo_children', 'parent_id')`,
		`INSERT INTO task_guards (name, aggregate_table, task_column, holds, error_code, except_table)
		 VALUES ('demo parent', 'stores', 'parent_id', 'true', 'DEMO', 'demo_children')`)
	require.Empty(t, lifecycleColumns(t, db, "demo_children"))
	var def string
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE indexname = 'demo_children_list'`).Scan(&def))
	require.Contains(t, def, "(workspace_id, parent_id, created_at DESC, id DESC)")

	exec(`SELECT drop_task_table('demo_children')`)
	var table, tasks, guards int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT
		  (SELECT count(*) FROM pg_class WHERE relname = 'demo_children'),
		  (SELECT count(*) FROM task_tables WHERE table_name = 'demo_children'),
		  (SELECT count(*) FROM task_guards WHERE name = 'demo parent')`).Scan(&table, &tasks, &guards))
	require.Equal(t, []int{0, 0, 0}, []int{table, tasks, guards})

	_, err := db.App.Exec(ctx, `SELECT drop_task_table('unpublishes')`)
	require.ErrorContains(t, err, "permission denied")
}
