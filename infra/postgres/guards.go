package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// TaskGuards implements port.TaskGuards over the task tables of the registered flows: the
// guards of sql/060_task_guards.sql (check_task_guards) on one task's row.
type TaskGuards struct {
	// Tables are the flows' task tables (app/worker/flows.TaskTables).
	Tables []port.TaskTable
}

var _ port.TaskGuards = TaskGuards{}

// Unfinished implements port.TaskGuards (task_unfinished, sql/060).
func (g TaskGuards) Unfinished(ctx context.Context, column string, id uuid.UUID) (int, error) {
	tx, _, err := mustTx(ctx, "postgres.TaskGuards.Unfinished")
	if err != nil {
		return 0, err
	}
	var n int
	err = tx.QueryRow(ctx, `SELECT task_unfinished($1, $2)`, column, id).Scan(&n)
	return n, TranslateError(err)
}

// Check implements port.TaskGuards: the domain.GuardError of the first guard that does not
// hold of the aggregates task id names, nil when every guard holds or there is no such task;
// from the task's locking read when it asked (port.CheckingGuards), else by one statement.
func (g TaskGuards) Check(ctx context.Context, queue string, id uuid.UUID) error {
	tx, _, err := mustTx(ctx, "postgres.TaskGuards.Check")
	if err != nil {
		return err
	}
	table := ""
	for _, t := range g.Tables {
		if t.Queue == queue {
			table = t.Table
		}
	}
	if table == "" {
		return fmt.Errorf("postgres.TaskGuards: no task table of queue %s", queue)
	}
	if g, ok := takeLocked[guardRefusal](ctx, guardsOf(table), id); ok {
		return g.err() // checked by the task's locking read (port.CheckingGuards)
	}
	// Answered, not raised (task_guard_refusal): a refusal leaves the transaction usable, so
	// the task's failure is recorded in it.
	q := `SELECT task_guard_refusal($1, to_jsonb(t)) FROM ` + pgx.Identifier{table}.Sanitize() + ` t WHERE t.id = $2`
	var code *string
	switch err = tx.QueryRow(ctx, q, table, id).Scan(&code); {
	case err == pgx.ErrNoRows:
		return nil // no such task: the engine's own read says so
	case err != nil:
		return TranslateError(err)
	case code == nil:
		return nil
	}
	return guardRefusal{code: *code}.err()
}

// guardRefusal is what task_guard_refusal (sql/068) answered of a task with its locking read
// (port.CheckingGuards), kept in the transaction for Check: the code of the guard error, or
// "" when every guard holds.
type guardRefusal struct{ code string }

// err is the refusal as Check returns it.
func (g guardRefusal) err() error {
	if g.code == "" {
		return nil
	}
	if e, ok := domain.GuardErrorOf(g.code); ok {
		return e
	}
	return fmt.Errorf("postgres.TaskGuards: guard error code %s has no domain.GuardError", g.code)
}

// guardsOf names, among the rows a transaction keeps (keepLocked), the guards' answer of a
// task of table.
func guardsOf(table string) string { return table + " guards" }
