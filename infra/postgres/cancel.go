package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// OperationTasks implements port.OperationTasks over the flows' task tables (each indexed
// by operation_id, sql/056_task_cancel.sql) and the live outbox.
type OperationTasks struct {
	// Tables are the flows' task tables (app/worker/flows.TaskTables).
	Tables []port.TaskTable
}

var _ port.OperationTasks = OperationTasks{}

func (o OperationTasks) table(queue string) (port.TaskTable, error) {
	for _, t := range o.Tables {
		if t.Queue == queue {
			return t, nil
		}
	}
	return port.TaskTable{}, fmt.Errorf("no task table for queue %q", queue)
}

// TaskOf implements port.OperationTasks.
func (o OperationTasks) TaskOf(ctx context.Context, queue string, operationID uuid.UUID) (uuid.UUID, error) {
	const op = "postgres.OperationTasks.TaskOf"
	t, err := o.table(queue)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%s: %w", op, err)
	}
	tx, _, err := mustTx(ctx, op)
	if err != nil {
		return uuid.Nil, err
	}
	var id uuid.UUID
	err = tx.QueryRow(ctx, `SELECT id FROM `+pgx.Identifier{t.Table}.Sanitize()+` WHERE operation_id = $1 ORDER BY created_at LIMIT 1`,
		operationID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, domain.ErrNotFound
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	return id, nil
}

// DropRequests implements port.OperationTasks: the task's request events (its aggregate, its
// id in the payload's task field) are locked (FOR UPDATE waits for a claim that holds them,
// and makes the claims, the sweep and the fair-share release that come later skip them),
// and those pending and never leased are deleted.
func (o OperationTasks) DropRequests(ctx context.Context, queue string, taskID uuid.UUID) error {
	const op = "postgres.OperationTasks.DropRequests"
	t, err := o.table(queue)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	tx, _, err := mustTx(ctx, op)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, fmt.Sprintf(`WITH l AS (
		  SELECT o.id, o.status, o.locked_until FROM outbox_events o JOIN %s t
		    ON o.workspace_id = t.workspace_id AND o.aggregate_type = $2 AND o.aggregate_id = t.%s::text
		  WHERE t.id = $1 AND o.event_payload ->> $3::text = $1::text
		  FOR UPDATE OF o)
		DELETE FROM outbox_events o USING l
		WHERE o.id = l.id AND l.status = 'pending' AND l.locked_until IS NULL`,
		pgx.Identifier{t.Table}.Sanitize(), pgx.Identifier{t.AggregateColumn}.Sanitize()), taskID, t.AggregateType, t.TaskIDField)
	if err != nil {
		return fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	return nil
}
