package domain

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

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
type AITask struct {
	Task
	Kind      string
	ProductID uuid.UUID
	// Prompt is the instruction the client gave (input.prompt); it is user content, not a secret.
	Prompt string
	// Output is the provider's result: text, a category path, or an image reference.
	Output            json.RawMessage
	ProviderRequestID string
}

// AI task errors.
var (
	ErrAITaskNotFound = NewError(KindNotFound, "AI_TASK_NOT_FOUND", "the AI task does not exist")
)

// MaxPromptLength bounds input.prompt, in characters.
const MaxPromptLength = 4000

// NewAITask validates and returns a pending AI task.
func NewAITask(id, workspaceID, operationID uuid.UUID, kind string, productID uuid.UUID, prompt string, now time.Time) (AITask, error) {
	switch kind {
	case AIKindText, AIKindCategory, AIKindImage:
	default:
		return AITask{}, Invalid("kind", "must be text, category or image")
	}
	prompt = strings.TrimSpace(prompt)
	if utf8.RuneCountInString(prompt) > MaxPromptLength {
		return AITask{}, Invalid("input.prompt", "at most 4000 characters")
	}
	return AITask{Task: NewTask(id, workspaceID, operationID, now), Kind: kind, ProductID: productID, Prompt: prompt}, nil
}

// AITaskRequested asks a worker to run an AI task.
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
