package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// TaskGuardAnswers is TaskGuards whose Check asks task_guard_answer
// (sql/071_task_guard_answer.sql), which answers the code of the guard that does not hold
// instead of raising it: the refusal leaves the begin step's transaction usable, so the
// task's failure is recorded in it with the guard's error. One statement, like
// TaskGuards.Check.
type TaskGuardAnswers struct {
	TaskGuards
}

var _ port.TaskGuards = TaskGuardAnswers{}

// Check implements port.TaskGuards: the domain.GuardError of the first guard that does not
// hold of the aggregates task id names, nil when every guard holds or there is no such task.
func (g TaskGuardAnswers) Check(ctx context.Context, queue string, id uuid.UUID) error {
	tx, _, err := mustTx(ctx, "postgres.TaskGuardAnswers.Check")
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
		return fmt.Errorf("postgres.TaskGuardAnswers: no task table of queue %s", queue)
	}
	q := `SELECT task_guard_answer($1, to_jsonb(t)) FROM ` + pgx.Identifier{table}.Sanitize() + ` t WHERE t.id = $2`
	var code *string
	err = tx.QueryRow(ctx, q, table, id).Scan(&code)
	switch {
	case err == pgx.ErrNoRows:
		return nil // no such task: the engine's own read says so
	case err != nil:
		return TranslateError(err)
	case code == nil:
		return nil
	}
	if e, ok := domain.GuardErrorOf(*code); ok {
		return e
	}
	return fmt.Errorf("postgres.TaskGuardAnswers: guard error code %s has no domain.GuardError", *code)
}
