package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/outbox"
)

// The console's reads across workspaces: each calls one SECURITY DEFINER function of sql/011,
// which only listing_operator may execute.

// Total is the number of outbox events of one status, destination and workspace.
type Total struct {
	Status, Destination string
	WorkspaceID         uuid.UUID
	Events              int64
	OldestCreatedAt     time.Time
}

// DeadLetter is one dead letter with its redrive history.
type DeadLetter struct {
	ID, WorkspaceID        uuid.UUID
	Destination, EventType string
	Attempts               int
	LastError              string
	CreatedAt              time.Time
	Redrives               []PastRedrive
}

// PastRedrive is one earlier redrive of an event.
type PastRedrive struct {
	By                   string    `json:"by"`
	Reason               string    `json:"reason"`
	At                   time.Time `json:"at"`
	PreviousAttemptCount int       `json:"previous_attempt_count"`
}

// OutboxAction is one recorded redrive or purge.
type OutboxAction struct {
	Action               string
	WorkspaceID, EventID uuid.UUID
	Operator, Reason     string
	ActedAt              time.Time
}

// Operation is an operation as operators see it (without its result).
type Operation struct {
	ID, WorkspaceID, ResourceID                         uuid.UUID
	Type, Status, ResourceType, ErrorCode, ErrorMessage string
	CreatedAt, UpdatedAt                                time.Time
	// Progress and ProgressAt are read on the operation's own page only (nil elsewhere).
	Progress   *domain.Progress
	ProgressAt *time.Time
}

// ProgressPercent is Progress as a whole percentage of its total; -1 when there is no
// progress or no total.
func (o Operation) ProgressPercent() int {
	if o.Progress == nil || o.Progress.Total == nil || *o.Progress.Total <= 0 {
		return -1
	}
	return int(min(100, o.Progress.Done*100 / *o.Progress.Total))
}

// Bounds of an operator_actions row, in bytes (its CHECKs count characters, never more than
// bytes): the operator's name and the reason share the outbox's bounds.
const (
	MaxActionLength       = 100
	MaxActionTargetLength = 500
)

// QueueAction is one recorded action of an operator on a queue.
type QueueAction struct {
	Operator, Action, Target, Reason string
	ActedAt                          time.Time
}

// errOperationNotFound is returned by operation when no operation has the id.
var errOperationNotFound = errors.New("console: no operation with this id")

type reader struct{ pool *pgxpool.Pool }

func (r reader) totals(ctx context.Context, limit int) ([]Total, error) {
	rows, err := r.pool.Query(ctx, `SELECT status, destination, workspace_id, events, oldest_created_at FROM operator_outbox_totals($1)`, limit)
	if err != nil {
		return nil, fmt.Errorf("console.totals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Total, error) {
		var t Total
		return t, row.Scan(&t.Status, &t.Destination, &t.WorkspaceID, &t.Events, &t.OldestCreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("console.totals: %w", err)
	}
	return out, nil
}

func (r reader) deadLetters(ctx context.Context, limit int) ([]DeadLetter, error) {
	rows, err := r.pool.Query(ctx, `SELECT id, workspace_id, destination, event_type, attempt_count, last_error, created_at, redrives
		FROM operator_dead_letters($1)`, limit)
	if err != nil {
		return nil, fmt.Errorf("console.deadLetters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		err := row.Scan(&d.ID, &d.WorkspaceID, &d.Destination, &d.EventType, &d.Attempts, &d.LastError, &d.CreatedAt, &d.Redrives)
		// Written sanitized by the dispatcher; sanitized again in case an older writer did not.
		d.LastError = outbox.SanitizeText(d.LastError, 1000)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("console.deadLetters: %w", err)
	}
	return out, nil
}

func (r reader) outboxActions(ctx context.Context, limit int) ([]OutboxAction, error) {
	rows, err := r.pool.Query(ctx, `SELECT action, workspace_id, event_id, operator, reason, acted_at FROM operator_outbox_actions($1)`, limit)
	if err != nil {
		return nil, fmt.Errorf("console.outboxActions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxAction, error) {
		var a OutboxAction
		return a, row.Scan(&a.Action, &a.WorkspaceID, &a.EventID, &a.Operator, &a.Reason, &a.ActedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("console.outboxActions: %w", err)
	}
	return out, nil
}

const operationColumns = `id, workspace_id, type, status, resource_type, resource_id, error_code, error_message, created_at, updated_at`

func scanOperation(row pgx.CollectableRow) (Operation, error) {
	var o Operation
	return o, row.Scan(&o.ID, &o.WorkspaceID, &o.Type, &o.Status, &o.ResourceType, &o.ResourceID, &o.ErrorCode, &o.ErrorMessage,
		&o.CreatedAt, &o.UpdatedAt)
}

func (r reader) operation(ctx context.Context, id uuid.UUID) (Operation, error) {
	rows, err := r.pool.Query(ctx, `SELECT `+operationColumns+`, progress, progress_at FROM operator_operation($1)`, id)
	if err != nil {
		return Operation{}, fmt.Errorf("console.operation: %w", err)
	}
	o, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (Operation, error) {
		var o Operation
		return o, row.Scan(&o.ID, &o.WorkspaceID, &o.Type, &o.Status, &o.ResourceType, &o.ResourceID, &o.ErrorCode,
			&o.ErrorMessage, &o.CreatedAt, &o.UpdatedAt, &o.Progress, &o.ProgressAt)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Operation{}, errOperationNotFound
	}
	if err != nil {
		return Operation{}, fmt.Errorf("console.operation: %w", err)
	}
	return o, nil
}

func (r reader) failedOperations(ctx context.Context, workspace uuid.UUID, limit int) ([]Operation, error) {
	rows, err := r.pool.Query(ctx, `SELECT `+operationColumns+` FROM operator_failed_operations($1, $2)`, workspace, limit)
	if err != nil {
		return nil, fmt.Errorf("console.failedOperations: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanOperation)
	if err != nil {
		return nil, fmt.Errorf("console.failedOperations: %w", err)
	}
	return out, nil
}

func (r reader) queueActions(ctx context.Context, limit int) ([]QueueAction, error) {
	rows, err := r.pool.Query(ctx, `SELECT operator, action, target, reason, acted_at FROM operator_actions
		ORDER BY acted_at DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("console.queueActions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueAction, error) {
		var a QueueAction
		return a, row.Scan(&a.Operator, &a.Action, &a.Target, &a.Reason, &a.ActedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("console.queueActions: %w", err)
	}
	return out, nil
}

// recorded runs act inside a transaction that records it in operator_actions: the record
// commits only when act succeeded (a crash between act and the commit loses the record, not
// the action; the log line stays).
func (r reader) recorded(ctx context.Context, a QueueAction, act func(context.Context) error) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("console.recorded: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `INSERT INTO operator_actions (id, operator, action, target, reason) VALUES ($1, $2, $3, $4, $5)`,
		domain.NewID(), a.Operator, a.Action, a.Target, a.Reason); err != nil {
		return fmt.Errorf("console.recorded: %w", err)
	}
	if err := act(ctx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("console.recorded: commit: %w", err)
	}
	return nil
}
