package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestRenumbered(t *testing.T) {
	for _, c := range []struct {
		in, out string
		ok      bool
	}{
		{`UPDATE t SET a = $2, b = COALESCE(b, $3) WHERE id = $1`, `UPDATE t SET a = $12, b = COALESCE(b, $13) WHERE id = $11`, true},
		{`INSERT INTO o (a, b) VALUES ($1, $2::jsonb), ($3, $10::jsonb)`, `INSERT INTO o (a, b) VALUES ($11, $12::jsonb), ($13, $20::jsonb)`, true},
		{`UPDATE t SET a = '$1', "b$1" = $1, c$1 = $2 WHERE x = 'it''s'`, `UPDATE t SET a = '$1', "b$1" = $11, c$1 = $12 WHERE x = 'it''s'`, true},
		{`UPDATE t SET a = $$x$$`, ``, false},
		{`UPDATE t SET a = $1; SELECT 1`, ``, false},
		{`UPDATE t SET a = $1 -- note`, ``, false},
		{`UPDATE t SET a = 'open`, ``, false},
		{`UPDATE t SET a = $1 /* note */`, ``, false},
		{`UPDATE t SET a = 4 / 2 - 1`, `UPDATE t SET a = 4 / 2 - 1`, true},
	} {
		got, ok := renumbered(c.in, 10)
		require.Equal(t, c.ok, ok, c.in)
		if ok {
			require.Equal(t, c.out, got)
		}
	}
}

// Consecutive writes of distinct tables become one statement; a plain statement, a scope
// change or a second write of a table starts another; the merged statement's error goes
// through the onErr of the member whose table it names.
func TestMergeWrites(t *testing.T) {
	named := func(name string) func(error) error {
		return func(err error) error { return fmt.Errorf("%s: %w", name, err) }
	}
	w := func(table string, sql string, args ...any) queued {
		return queued{sql: sql, args: args, table: table, onErr: named(table)}
	}
	plain := queued{sql: `SELECT set_config('app.workspace_id', $1, true)`, args: []any{"ws"}}
	qs := []queued{
		w("tasks", `UPDATE tasks SET a = $2 WHERE id = $1`, 1, "a"),
		w("operations", `UPDATE operations SET b = $2, c = $3 WHERE id = $1`, 2, "b", "c"),
		w("outbox_events", `INSERT INTO outbox_events (id) VALUES ($1)`, 3),
		plain,
		w("tasks", `UPDATE tasks SET a = $2 WHERE id = $1`, 4, "d"),
		w("tasks", `UPDATE tasks SET a = $2 WHERE id = $1`, 5, "e"),
		w("operations", `UPDATE operations SET b = $2, c = $3 WHERE id = $1`, 6, "f", "g"),
	}
	got := mergeWrites(qs)
	require.Len(t, got, 4)
	require.Equal(t, `WITH w1 AS (UPDATE tasks SET a = $2 WHERE id = $1), w2 AS (UPDATE operations SET b = $4, c = $5 WHERE id = $3) INSERT INTO outbox_events (id) VALUES ($6)`, got[0].sql)
	require.Equal(t, []any{1, "a", 2, "b", "c", 3}, got[0].args)
	require.Equal(t, plain.sql, got[1].sql)
	require.Equal(t, qs[4].sql, got[2].sql)
	require.Equal(t, `WITH w1 AS (UPDATE tasks SET a = $2 WHERE id = $1) UPDATE operations SET b = $4, c = $5 WHERE id = $3`, got[3].sql)
	require.Equal(t, []any{5, "e", 6, "f", "g"}, got[3].args)

	dup := &pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "outbox_events_pkey"`, TableName: "outbox_events"}
	require.EqualError(t, got[0].onErr(dup), "outbox_events: "+dup.Error())
	rls := &pgconn.PgError{Code: "42501", Message: `new row violates row-level security policy for table "operations"`}
	require.EqualError(t, got[0].onErr(rls), "operations: "+rls.Error())
	other := errors.New("conn closed")
	err := got[0].onErr(other)
	require.ErrorIs(t, err, other)
	require.Contains(t, err.Error(), "tasks, operations, outbox_events")

	// Nothing to merge: the same slice.
	single := qs[3:5]
	require.Equal(t, single, mergeWrites(single))
}

// Writes of one RowsWrite under one scope become one statement of their rows, merged with
// the other tables' writes; a key already in the statement, or another statement of the
// table, starts the next one; a statement of rows reports through its first write's onErr.
func TestMergeWritesSendsRowsTogether(t *testing.T) {
	rowsOf := func(table string) *RowsWrite {
		return NewRowsWrite(table, 2, func(rows int) string {
			s := "INSERT INTO " + table + " (id, v) VALUES "
			for i := range rows {
				if i > 0 {
					s += ", "
				}
				s += fmt.Sprintf("($%d, $%d)", 2*i+1, 2*i+2)
			}
			return s
		})
	}
	tasks, ops := rowsOf("tasks"), rowsOf("operations")
	row := func(w *RowsWrite, name string, args ...any) queued {
		return queued{sql: w.SQL(len(args) / 2), args: args, table: w.table, rows: w,
			onErr: func(err error) error { return fmt.Errorf("%s: %w", name, err) }}
	}
	plain := queued{sql: `SELECT set_config('app.workspace_id', $1, true)`, args: []any{"ws"}}
	qs := []queued{
		row(tasks, "step 1", 1, "a"),
		row(ops, "step 1", 10, "b"),
		row(tasks, "step 2", 2, "c", 3, "d"),
		row(ops, "step 2", 11, "e"),
		plain,
		row(tasks, "step 3", 4, "f"),
		row(tasks, "step 4", 4, "g"), // the same key: the next statement
		{sql: `UPDATE tasks SET v = $2 WHERE id = $1`, args: []any{5, "h"}, table: "tasks"}, // not of tasks' rows: the next
	}
	got := mergeWrites(qs)
	require.Len(t, got, 5)
	require.Equal(t, `WITH w1 AS (INSERT INTO tasks (id, v) VALUES ($1, $2), ($3, $4), ($5, $6)) INSERT INTO operations (id, v) VALUES ($7, $8), ($9, $10)`, got[0].sql)
	require.Equal(t, []any{1, "a", 2, "c", 3, "d", 10, "b", 11, "e"}, got[0].args)
	require.Equal(t, plain, got[1])
	require.Equal(t, qs[5].sql, got[2].sql)
	require.Equal(t, []any{4, "f"}, got[2].args)
	require.Equal(t, []any{4, "g"}, got[3].args)
	require.Equal(t, qs[7].sql, got[4].sql)

	rls := &pgconn.PgError{Code: "42501", Message: `new row violates row-level security policy for table "tasks"`}
	require.EqualError(t, got[0].onErr(rls), "step 1: "+rls.Error(), "the first write of the rows names the statement")
}

// A repository's update of n rows is one UPDATE … FROM VALUES whose first row types the
// parameters; a column written once keeps its value (COALESCE), and one row is the plain
// update.
func TestUpdateRowsStatement(t *testing.T) {
	w := newUpdateRows("tasks", []string{"id", "status", "snapshot"}, "UPDATE tasks SET status = $2, snapshot = COALESCE(snapshot, $3) WHERE id = $1",
		"status = v.status, snapshot = COALESCE(x.snapshot, v.snapshot)")
	require.Equal(t, "UPDATE tasks SET status = $2, snapshot = COALESCE(snapshot, $3) WHERE id = $1", w.SQL(1))
	require.Equal(t, "UPDATE tasks AS x SET status = v.status, snapshot = COALESCE(x.snapshot, v.snapshot) FROM (VALUES "+
		"((NULL::tasks).id, (NULL::tasks).status, (NULL::tasks).snapshot), ($1, $2, $3), ($4, $5, $6)) AS v(id, status, snapshot) WHERE x.id = v.id", w.SQL(2))
}
