package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// CreateAITask starts an AI task about a product as it is when the command runs (see
// CreateAITaskHandler.Handle; docs/http-api.md).
type CreateAITask struct {
	TaskID      uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	Kind        string
	ProductID   uuid.UUID
	Prompt      string
}

// CommandName implements bus.Command.
func (CreateAITask) CommandName() string { return "CreateAITask" }

// CreateAITaskHandler handles CreateAITask.
type CreateAITaskHandler struct {
	flow     FlowDeps
	products port.Products
	tasks    port.Repository[domain.AITask]
}

// NewCreateAITaskHandler returns the handler. It panics on a nil dependency.
func NewCreateAITaskHandler(flow FlowDeps, products port.Products, tasks port.Repository[domain.AITask]) CreateAITaskHandler {
	mustHave("CreateAITaskHandler", flow, products, tasks)
	return CreateAITaskHandler{flow: flow, products: products, tasks: tasks}
}

// Handle implements bus.Handler. An unknown product is PRODUCT_NOT_FOUND. The task is about
// the product as this transaction reads it: a snapshot of its content is stored on the task,
// in the same transaction, and the worker builds the provider request from the task alone
// (see domain.AITask).
func (h CreateAITaskHandler) Handle(ctx context.Context, cmd CreateAITask) (Started[domain.AITask], error) {
	p, err := getProduct(ctx, h.products, cmd.ProductID)
	if err != nil {
		return Started[domain.AITask]{}, err
	}
	op := h.flow.newOperation(cmd.WorkspaceID, cmd.UserID, domain.OpAITask, "ai_task", cmd.TaskID)
	t, err := domain.NewAITask(cmd.TaskID, cmd.WorkspaceID, op.ID, cmd.Kind, p, cmd.Prompt, h.flow.Now())
	if err != nil {
		return Started[domain.AITask]{}, err
	}
	err = h.flow.start(ctx, op, func() error { return h.tasks.Insert(ctx, t) }, t.RequestEvent())
	if err != nil {
		return Started[domain.AITask]{}, err
	}
	return Started[domain.AITask]{Resource: t, Operation: op}, nil
}
