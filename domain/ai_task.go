package domain

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"
)

// AI task kinds.
const (
	AIKindText     = "text"
	AIKindCategory = "category"
	AIKindImage    = "image"
)

// AITask is a call to the AI provider about a product. The provider is called with the task
// id as Idempotency-Key, and usage is billed once per task (a ledger row unique per task).
// The provider request is built from the task alone (Kind, Prompt, Snapshot), so every
// delivery of the task sends the same request.
type AITask struct {
	Task
	Kind      string
	ProductID uuid.UUID
	// Prompt is the instruction the client gave (input.prompt); it is user content, not a secret.
	Prompt string
	// Snapshot is the product's content when the task was requested, captured with the
	// request and never changed: the task is about this content, not the product's current
	// one. Nil only on a task requested before snapshots existed
	// (sql/007_task_snapshots.sql) and not started since; the worker captures it, once, on
	// the task's next start.
	Snapshot *ProductSnapshot
	// Output is the provider's result: text, a category path, or an image reference.
	Output            json.RawMessage
	ProviderRequestID string
}

// AI task errors.
var (
	ErrAITaskNotFound = NewError(KindNotFound, "AI_TASK_NOT_FOUND", "the AI task does not exist")
)

// NewAITask validates and returns a pending AI task about the product's current content,
// kept as the task's Snapshot. Call it with the product read in the transaction that inserts
// the task.
func NewAITask(id, workspaceID, operationID uuid.UUID, kind string, product Product, prompt string, now time.Time) (AITask, error) {
	switch kind {
	case AIKindText, AIKindCategory, AIKindImage:
	default:
		return AITask{}, Invalid("kind", "must be text, category or image")
	}
	prompt = strings.TrimSpace(prompt)
	if err := checkText("input.prompt", prompt, MaxPromptLength, lineBreaks); err != nil {
		return AITask{}, err
	}
	snap := product.Snapshot()
	return AITask{Task: NewTask(id, workspaceID, operationID, now), Kind: kind, ProductID: product.ID, Prompt: prompt,
		Snapshot: &snap}, nil
}

// AITaskRequested asks a worker to run an AI task. It carries ids only; the content the task
// is about is the task's Snapshot.
type AITaskRequested struct {
	AITaskID    uuid.UUID `json:"ai_task_id"`
	OperationID uuid.UUID `json:"operation_id"`
	Kind        string    `json:"kind"`
	ProductID   uuid.UUID `json:"product_id"`
}

// EventType implements Event.
func (AITaskRequested) EventType() string { return "ai_task.requested" }

// AggregateType implements Event.
func (AITaskRequested) AggregateType() string { return "ai_task" }

// AggregateID implements Event.
func (e AITaskRequested) AggregateID() string { return e.AITaskID.String() }

func init() { RegisterEvent(AITaskRequested{}) }

// RequestEvent implements Requested.
func (t AITask) RequestEvent() Event {
	return AITaskRequested{AITaskID: t.ID, OperationID: t.OperationID, Kind: t.Kind, ProductID: t.ProductID}
}
