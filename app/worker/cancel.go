package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// ErrCancelled is the failure a flow's OnFail is told of when its task is cancelled before it
// started (Kind.Cancel): what else a final failure changes (a media rejected, a claim
// released, a ledger row written) a cancellation changes too.
var ErrCancelled = domain.NewError(domain.KindConflict, "CANCELLED", "the operation was cancelled before it started")

// TaskCanceller is a TaskKind that can cancel a task that has not started (Kind does).
type TaskCanceller interface {
	TaskKind
	// Cancel ends task id, which must be pending, cancelled, with its operation; it must run
	// inside a transaction of the task's workspace. See Kind.Cancel.
	Cancel(ctx context.Context, id uuid.UUID) (domain.Operation, error)
}

var _ TaskCanceller = Kind[domain.Publication]{}

// Cancel ends task id, which has not started (pending), cancelled, in ctx's transaction: the
// task (under its row lock, taken before its operation's, as every step takes them), its
// operation (cancelled, its finish published as operation.status_changed) and what else the
// flow's final failure changes (OnFail, told ErrCancelled). A job of the task delivered
// later finds it finished and does nothing. A running task is domain.ErrTaskStarted: it
// finishes as it would; a finished one domain.ErrOperationFinished.
func (k Kind[T]) Cancel(ctx context.Context, id uuid.UUID) (domain.Operation, error) {
	d := k.Deps
	t, err := k.Tasks.Update(ctx, id, func(v *T) error { return k.TaskOf(v).Cancel(d.Now()) })
	if errors.Is(err, domain.ErrTaskFinished) {
		return domain.Operation{}, domain.ErrOperationFinished
	}
	if err != nil {
		return domain.Operation{}, err
	}
	var before domain.Operation
	op, err := d.Operations.Update(ctx, k.TaskOf(&t).OperationID, func(o *domain.Operation) error {
		before = *o
		return o.Cancel(d.Now())
	})
	if err != nil {
		return domain.Operation{}, err
	}
	if err := d.Events.Publish(ctx, op.Finished(before)); err != nil {
		return domain.Operation{}, fmt.Errorf("worker.Cancel %s: %w", k.QueueName, err)
	}
	if k.OnFail != nil {
		if err := k.OnFail(ctx, t, FailureOf(ErrCancelled)); err != nil {
			return domain.Operation{}, fmt.Errorf("worker.Cancel %s: %w", k.QueueName, err)
		}
	}
	return op, nil
}

// Cancels implements port.OperationCanceller over the flows' task kinds: an operation's type
// names its flow, whose task kind cancels the operation's task. Safe for concurrent use.
type Cancels struct {
	// Queues maps each operation type to its flow's queue (Spec.Operation, Spec.Queue).
	Queues map[string]string
	// Kinds are the task kinds by queue.
	Kinds map[string]TaskKind
	// Tasks finds an operation's task and drops its undelivered requests.
	Tasks port.OperationTasks
}

var _ port.OperationCanceller = Cancels{}

// Cancel implements port.OperationCanceller. Before the task kind's Cancel, it locks the
// task's request events and drops those no dispatcher has leased yet
// (OperationTasks.DropRequests); the task's end itself gives back its fair-share slot and
// drops its held events (sql/053_outbox_fair_share.sql). It must run in a transaction that
// rolls back on error.
func (c Cancels) Cancel(ctx context.Context, op domain.Operation) (domain.Operation, error) {
	switch {
	case op.Status.Terminal():
		return op, domain.ErrOperationFinished
	case op.Status != domain.OperationPending:
		return op, domain.ErrTaskStarted
	}
	queue, ok := c.Queues[op.Type]
	kind, _ := c.Kinds[queue].(TaskCanceller)
	if !ok || kind == nil {
		return op, domain.ErrOperationNotCancellable
	}
	id, err := c.Tasks.TaskOf(ctx, queue, op.ID)
	if errors.Is(err, domain.ErrNotFound) {
		return op, domain.ErrOperationNotCancellable
	}
	if err != nil {
		return op, fmt.Errorf("worker.Cancels: %w", err)
	}
	// Before the task ends: its requests locked, so that no slot is taken for it after its end
	// freed its own.
	if err := c.Tasks.DropRequests(ctx, queue, id); err != nil {
		return op, fmt.Errorf("worker.Cancels: %w", err)
	}
	return kind.Cancel(ctx, id)
}
