package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/domain"
)

// Start is a flow's task-starting entry point when the engine derives it from the
// registration (Spec.Start): the command type other services send as a message, its HTTP
// endpoint (the route, its row among the endpoints, its error list) and the command itself,
// which runs through the bus like any command (RLS transaction, idempotency, outbox) and
// answers 202 with the task (Spec.Resource's Key and Body) and its operation. The flow
// writes only its Kind's Accept: what must hold, and the task.
//
// The body is empty or {}: a command with a body of its own keeps a catalogue command
// (infra/httpapi) and declares it in Messages.
type Start struct {
	// Type is the command type (listing.disconnect_store).
	Type string
	// Method and Path are the endpoint's, under /v1/workspaces/{workspace_id}
	// (DELETE /stores/{store_id}); the path's {ids} are handed to Accept by name.
	Method, Path string
	// NotFound are the not-found errors of the path's ids, in their order (a malformed id).
	NotFound []*domain.Error
	// OperationID names the endpoint in openapi.yaml.
	OperationID string
	// Errors are the refusals Accept and the guards may answer, besides the shared ones.
	Errors []*domain.Error
	// Summary and Description document the endpoint in openapi.yaml, whose operation is
	// generated from this declaration (make api-doc): the path and its parameters, the
	// Idempotency-Key, the 202 with the task (the schema named after Spec.Name) and its
	// operation, and the errors. Description says what the flow does and refuses; the body
	// and the command type are added to it.
	Summary, Description string
}

// Acceptance is what Kind.Accept builds a task of: who asks, the path's ids, and the task's
// and its operation's ids and time, which the engine chose.
type Acceptance struct {
	WorkspaceID, UserID uuid.UUID
	IDs                 map[string]uuid.UUID
	TaskID, OperationID uuid.UUID
	Now                 time.Time
}

// StartCommand is the bus command of a derived entry point (Spec.Start): the flow by queue,
// and the path's ids.
type StartCommand struct {
	Flow, Queue string
	// Operation and ResourceType are the operation's type and resource type.
	Operation, ResourceType string
	WorkspaceID, UserID     uuid.UUID
	IDs                     map[string]uuid.UUID
}

// CommandName implements bus.Command.
func (c StartCommand) CommandName() string { return "Start:" + c.Flow }

// Started is a derived entry point's result: the task it inserted and its operation.
type Started struct {
	Task      any
	Operation domain.Operation
}

// starter is a task kind that starts its tasks (Kind with Accept).
type starter interface {
	start(ctx context.Context, c StartCommand) (Started, error)
}

// Starts runs the derived entry points through the task kinds of the flows, by queue; it is
// the bus handler of StartCommand.
type Starts struct{ Kinds map[string]TaskKind }

var _ bus.Handler[StartCommand, Started] = Starts{}

// Handle implements bus.Handler: in the command's transaction, the flow's Accept builds the
// task, then the operation, the task and their events (the operation's first status and the
// task's request event) are written.
func (s Starts) Handle(ctx context.Context, c StartCommand) (Started, error) {
	k, ok := s.Kinds[c.Queue].(starter)
	if !ok {
		return Started{}, fmt.Errorf("worker.Starts: flow %s: no task kind with Accept", c.Flow)
	}
	return k.start(ctx, c)
}

func (k Kind[T]) start(ctx context.Context, c StartCommand) (Started, error) {
	if k.Accept == nil {
		return Started{}, fmt.Errorf("worker.Starts: queue %s: the task kind has no Accept", k.QueueName)
	}
	now := k.Deps.Now()
	id := domain.NewID()
	op := domain.NewOperation(c.WorkspaceID, c.UserID, c.Operation, c.ResourceType, id, now)
	task, err := k.Accept(ctx, Acceptance{WorkspaceID: c.WorkspaceID, UserID: c.UserID, IDs: c.IDs, TaskID: id, OperationID: op.ID, Now: now})
	if err != nil {
		return Started{}, err
	}
	if err := k.Deps.Operations.Insert(ctx, op); err != nil {
		return Started{}, err
	}
	if err := k.Tasks.Insert(ctx, task); err != nil {
		return Started{}, err
	}
	if err := k.Deps.Events.Publish(ctx, op.StatusChanged(), task.RequestEvent()); err != nil {
		return Started{}, err
	}
	return Started{Task: task, Operation: op}, nil
}
