package port

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
)

// OperationTasks finds an operation's task among the flows' task tables and drops what the
// outbox still holds for a task that will never run. Every method runs in the transaction
// carried by ctx (the operation's workspace) and fails without one.
type OperationTasks interface {
	// TaskOf returns the id of operation operationID's task in queue's task table, or
	// domain.ErrNotFound when it has none there.
	TaskOf(ctx context.Context, queue string, operationID uuid.UUID) (uuid.UUID, error)
	// DropRequests locks task taskID's request events (of queue's flow), whatever their
	// status, until the transaction ends, and deletes those no dispatcher has leased: no
	// dispatcher admits the task into a fair-share slot meanwhile, and a claim that had
	// admitted it is committed before this returns, so that the task's end (run after it, in
	// the same transaction) finds the slot to free. A leased event is left to its
	// dispatcher: its job finds the task finished.
	DropRequests(ctx context.Context, queue string, taskID uuid.UUID) error
}

// OperationCanceller cancels the task of a pending operation.
type OperationCanceller interface {
	// Cancel ends operation op's task, which has not started, cancelled, in ctx's transaction
	// (the operation's workspace): the task, the operation (published as
	// operation.status_changed), and whatever else its flow's end changes. It returns the
	// operation as cancelled; domain.ErrTaskStarted when the task has started,
	// domain.ErrOperationFinished when it has finished, domain.ErrOperationNotCancellable
	// when no flow runs operations of op's type.
	Cancel(ctx context.Context, op domain.Operation) (domain.Operation, error)
}
