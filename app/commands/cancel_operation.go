package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// CancelOperation cancels an operation whose task has not started: the task ends cancelled,
// so does the operation, and no job of the task does anything afterwards. A task that has
// started is not stopped (OPERATION_RUNNING: it finishes as it would); a finished operation
// is OPERATION_FINISHED. Cancelling is its own idempotency: a second cancel finds the
// operation finished.
type CancelOperation struct {
	OperationID uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
}

// CommandName implements bus.Command.
func (CancelOperation) CommandName() string { return "CancelOperation" }

// CancelOperationHandler handles CancelOperation.
type CancelOperationHandler struct {
	operations port.Repository[domain.Operation]
	cancels    port.OperationCanceller
}

// NewCancelOperationHandler returns the handler. It panics on a nil dependency.
func NewCancelOperationHandler(operations port.Repository[domain.Operation], cancels port.OperationCanceller) CancelOperationHandler {
	mustHave("CancelOperationHandler", operations, cancels)
	return CancelOperationHandler{operations: operations, cancels: cancels}
}

// Handle implements bus.Handler: OPERATION_NOT_FOUND for an operation the workspace does not
// have, else the operation as cancelled, or the refusal of port.OperationCanceller.
func (h CancelOperationHandler) Handle(ctx context.Context, cmd CancelOperation) (domain.Operation, error) {
	op, err := h.operations.Get(ctx, cmd.OperationID)
	if err != nil {
		return op, err
	}
	return h.cancels.Cancel(ctx, op)
}
