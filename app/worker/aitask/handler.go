package aitask

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// AI task errors of the handler (client-safe codes).
var (
	// ErrOutputUnusable: the provider answered, but nothing usable could be read from the
	// answer (e.g. an empty category). Permanent.
	ErrOutputUnusable = domain.NewError(domain.KindInvalid, "AI_OUTPUT_UNUSABLE",
		"the AI provider's answer could not be used")
	// ErrKindUnsupported: the task's kind is not one the handler runs. Permanent.
	ErrKindUnsupported = domain.NewError(domain.KindInvalid, "AI_TASK_KIND_UNSUPPORTED",
		"the AI task kind is not supported")
)

// ImageKey is the object key of an image task's image: a pure function of the workspace and
// the task, so storing it again overwrites. It is not shown to clients.
func ImageKey(workspaceID, taskID uuid.UUID) string {
	return "workspaces/" + workspaceID.String() + "/ai-tasks/" + taskID.String() + "/image"
}

// Config configures New.
type Config struct {
	// Deps are the worker's shared dependencies. Tx, Operations and Events are required;
	// Now defaults to time.Now and Log to slog.Default().
	Deps worker.Deps
	// Tasks stores the AI tasks. Required.
	Tasks port.Repository[domain.AITask]
	// Products reads the product of a task that has no snapshot (requested before snapshots
	// existed), to capture it once; a task with a snapshot never reads it. Required.
	Products port.Products
	// Ledger bills usage, one row per task. Required.
	Ledger port.AILedger
	// CallTimeout fences the call (worker.Flow.CallTimeout): the provider's answer, and an
	// image's storing, end within it. Zero: no fence.
	CallTimeout time.Duration
	// Provider is the AI provider. Required.
	Provider port.AIProvider
	// Storage keeps generated images. Required.
	Storage port.ObjectStorage
	// TextModel is the chat model of text and category tasks (AI_TEXT_MODEL). Default "":
	// the provider adapter's default model.
	TextModel string
}

func (c *Config) setDefaults() {
	if c.Deps.Now == nil {
		c.Deps.Now = time.Now
	}
	if c.Deps.Log == nil {
		c.Deps.Log = slog.Default()
	}
}

// Validate reports the first missing field without changing c.
func (c Config) Validate() error {
	switch {
	case c.Deps.Tx == nil || c.Deps.Operations == nil || c.Deps.Events == nil:
		return errors.New("aitask: Deps.Tx, Deps.Operations and Deps.Events are required")
	case c.Tasks == nil || c.Products == nil || c.Ledger == nil || c.Provider == nil || c.Storage == nil:
		return errors.New("aitask: Tasks, Products, Ledger, Provider and Storage are required")
	}
	return nil
}

// Handler handles the jobs of the ai-task queue (worker.QueueAITask) through the task
// lifecycle (worker.Flow). Safe for concurrent use; see the package comment for its
// contract.
type Handler struct {
	cfg  Config
	flow worker.Flow[domain.AITask, struct{}, answer]
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("aitask.New: %w", err)
	}
	h := &Handler{cfg: cfg}
	h.flow = worker.Flow[domain.AITask, struct{}, answer]{Kind: Tasks(cfg.Deps, cfg.Tasks, cfg.Ledger),
		Begin: h.begin, Call: h.call, Record: h.record, Hold: hold, Unhold: unhold, CallTimeout: cfg.CallTimeout,
		OnFail: func(ctx context.Context, t domain.AITask, ans answer, _ worker.Failure) error {
			_, err := cfg.Ledger.Record(ctx, t, ans.usage, ans.model)
			return err
		}}
	return h, nil
}

// Handle runs the task of a domain.AITaskRequested job (see the package comment).
func (h *Handler) Handle(ctx context.Context, job worker.Job) error { return h.flow.Handle(ctx, job) }

// ImageOutput describes a generated image in a task's output.
type ImageOutput struct {
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
}

// Output is a task's output: one field, by kind.
type Output struct {
	Text     string       `json:"text,omitempty"`
	Category string       `json:"category,omitempty"`
	Image    *ImageOutput `json:"image,omitempty"`
}

// billing is what the provider reported for the ledger.
type billing struct {
	usage port.Usage
	model string
}

// answer is the outcome of the provider call, ready to record.
type answer struct {
	output    json.RawMessage
	requestID string
	billing
}

// begin gives a task without a snapshot (requested before snapshots existed) the product's
// current content, so that this and every later delivery send the same request. It runs
// under the task's row lock; a snapshot once stored is never changed (see
// postgres.NewAITasks).
func (h *Handler) begin(ctx context.Context, t *domain.AITask) (struct{}, error) {
	if t.Snapshot != nil {
		return struct{}{}, nil
	}
	product, err := h.cfg.Products.Get(ctx, t.ProductID)
	if err != nil {
		return struct{}{}, err
	}
	snap := product.Snapshot()
	t.Snapshot = &snap
	return struct{}{}, nil
}

// record stores the output and bills the usage (record step).
func (h *Handler) record(ctx context.Context, t *domain.AITask, ans answer) (any, error) {
	t.Output, t.ProviderRequestID = ans.output, ans.requestID
	inserted, err := h.cfg.Ledger.Record(ctx, *t, ans.usage, ans.model)
	if err != nil {
		return nil, err
	}
	if !inserted {
		h.cfg.Deps.Log.WarnContext(ctx, "ai usage was already in the ledger", slog.String("ai_task_id", t.ID.String()))
	}
	return map[string]uuid.UUID{"ai_task_id": t.ID}, nil
}

// call makes the task's one provider call (Idempotency-Key: the task id) and, for an image,
// stores it. It runs outside any transaction. An error after the provider answered comes
// with the answer's billing, for the ledger row of the failed task. The request is built from the stored task only (prompt), so every
// delivery of the task sends the same one.
func (h *Handler) call(ctx context.Context, task domain.AITask, _ struct{}, _ worker.Tx) (answer, error) {
	key := task.ID.String()
	p := prompt(task)
	var out Output
	var ans answer
	switch task.Kind {
	case domain.AIKindText, domain.AIKindCategory:
		res, err := h.cfg.Provider.CompleteText(ctx, key, h.cfg.TextModel, p)
		if err != nil {
			return answer{}, fmt.Errorf("complete text: %w", err)
		}
		ans.billing = billing{usage: res.Usage, model: res.Model}
		ans.requestID = res.ProviderRequestID
		if task.Kind == domain.AIKindText {
			out.Text = res.Output
			if out.Text == "" {
				return ans, worker.Permanent(fmt.Errorf("complete text: empty answer: %w", ErrOutputUnusable))
			}
		} else {
			out.Category = category(res.Output)
			if out.Category == "" {
				return ans, worker.Permanent(fmt.Errorf("categorize: no category in the answer: %w", ErrOutputUnusable))
			}
		}
	case domain.AIKindImage:
		res, err := h.cfg.Provider.GenerateImage(ctx, key, p)
		if err != nil {
			return answer{}, fmt.Errorf("generate image: %w", err)
		}
		ans.billing = billing{usage: res.Usage, model: res.Model}
		ans.requestID = res.ProviderRequestID
		if len(res.Image) == 0 {
			return ans, worker.Permanent(fmt.Errorf("generate image: empty image: %w", ErrOutputUnusable))
		}
		size := int64(len(res.Image))
		if err := h.cfg.Storage.Put(ctx, ImageKey(task.WorkspaceID, task.ID), bytes.NewReader(res.Image), size, res.ContentType); err != nil {
			return ans, fmt.Errorf("store image: %w", err)
		}
		out.Image = &ImageOutput{ContentType: res.ContentType, Size: size}
	default:
		return ans, worker.Permanent(fmt.Errorf("kind %q: %w", task.Kind, ErrKindUnsupported))
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return ans, fmt.Errorf("encode output: %w", err)
	}
	ans.output = raw
	return ans, nil
}

// taskOf gives worker.Kind the task state it embeds.
func taskOf(t *domain.AITask) *domain.Task { return &t.Task }
