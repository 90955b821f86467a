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

// Handler handles the jobs of the ai-task queue (worker.QueueAITask). Safe for concurrent
// use; see the package comment for its contract.
type Handler struct {
	cfg Config
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("aitask.New: %w", err)
	}
	return &Handler{cfg: cfg}, nil
}

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

// Handle runs the task of a domain.AITaskRequested job (see the package comment).
func (h *Handler) Handle(ctx context.Context, job worker.Job) error {
	var ev domain.AITaskRequested
	if err := job.Decode(&ev); err != nil {
		return err
	}
	log := h.cfg.Deps.Log.With(slog.String("job_id", job.ID), slog.String("workspace_id", job.WorkspaceID.String()),
		slog.String("ai_task_id", ev.AITaskID.String()), slog.Int("attempt", job.Attempt))
	var billed billing // known usage, for the ledger row of a failed task
	err := h.run(ctx, job, ev, &billed, log)
	if err == nil {
		return nil
	}
	return h.settle(ctx, job, ev, billed, err, log)
}

// run starts the task, calls the provider and records the result. It returns worker.ErrSkip
// when the task is finished (by an earlier or a concurrent delivery).
func (h *Handler) run(ctx context.Context, job worker.Job, ev domain.AITaskRequested, billed *billing, log *slog.Logger) error {
	d := h.cfg.Deps
	var task domain.AITask
	err := d.Step(ctx, job, func(ctx context.Context) error {
		t, err := worker.BeginTask(ctx, d, h.cfg.Tasks, ev.AITaskID, taskOf)
		if err != nil {
			return err
		}
		if t.Snapshot == nil {
			if t, err = h.capture(ctx, t.ID, t.ProductID); err != nil {
				return err
			}
		}
		task = t
		return nil
	})
	if err != nil {
		return err
	}

	ans, err := h.call(ctx, task, billed)
	if err != nil {
		return err
	}

	err = d.Step(ctx, job, func(ctx context.Context) error {
		t, err := h.cfg.Tasks.Update(ctx, task.ID, func(t *domain.AITask) error {
			if t.Status.Terminal() {
				return worker.ErrSkip
			}
			t.Output, t.ProviderRequestID = ans.output, ans.requestID
			return t.Succeed(d.Now())
		})
		if err != nil {
			return err
		}
		inserted, err := h.cfg.Ledger.Record(ctx, t, ans.usage, ans.model)
		if err != nil {
			return err
		}
		if !inserted {
			log.WarnContext(ctx, "ai usage was already in the ledger")
		}
		return d.SucceedOperation(ctx, t.OperationID, map[string]uuid.UUID{"ai_task_id": t.ID})
	})
	if err != nil {
		return fmt.Errorf("record result: %w", err)
	}
	log.InfoContext(ctx, "ai task finished", slog.String("kind", task.Kind), slog.String("provider_request_id", ans.requestID),
		slog.Int("prompt_tokens", ans.usage.PromptTokens), slog.Int("completion_tokens", ans.usage.CompletionTokens),
		slog.Int("images", ans.usage.Images))
	return nil
}

// capture stores the product's current content as the snapshot of a task that has none (one
// requested before snapshots existed), so that this and every later delivery send the same
// request. It must run in the Step that started the task, which holds the task's row lock;
// a snapshot once stored is never changed (see postgres.NewAITasks).
func (h *Handler) capture(ctx context.Context, id, productID uuid.UUID) (domain.AITask, error) {
	product, err := h.cfg.Products.Get(ctx, productID)
	if err != nil {
		return domain.AITask{}, err
	}
	return h.cfg.Tasks.Update(ctx, id, func(t *domain.AITask) error {
		if t.Snapshot == nil {
			snap := product.Snapshot()
			t.Snapshot = &snap
		}
		return nil
	})
}

// call makes the task's one provider call (Idempotency-Key: the task id) and, for an image,
// stores it. It runs outside any transaction. billed receives the usage as soon as the
// provider answered. The request is built from the stored task only (prompt), so every
// delivery of the task sends the same one.
func (h *Handler) call(ctx context.Context, task domain.AITask, billed *billing) (answer, error) {
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
		*billed = ans.billing
		ans.requestID = res.ProviderRequestID
		if task.Kind == domain.AIKindText {
			out.Text = res.Output
			if out.Text == "" {
				return answer{}, worker.Permanent(fmt.Errorf("complete text: empty answer: %w", ErrOutputUnusable))
			}
		} else {
			out.Category = category(res.Output)
			if out.Category == "" {
				return answer{}, worker.Permanent(fmt.Errorf("categorize: no category in the answer: %w", ErrOutputUnusable))
			}
		}
	case domain.AIKindImage:
		res, err := h.cfg.Provider.GenerateImage(ctx, key, p)
		if err != nil {
			return answer{}, fmt.Errorf("generate image: %w", err)
		}
		ans.billing = billing{usage: res.Usage, model: res.Model}
		*billed = ans.billing
		ans.requestID = res.ProviderRequestID
		if len(res.Image) == 0 {
			return answer{}, worker.Permanent(fmt.Errorf("generate image: empty image: %w", ErrOutputUnusable))
		}
		size := int64(len(res.Image))
		if err := h.cfg.Storage.Put(ctx, ImageKey(task.WorkspaceID, task.ID), bytes.NewReader(res.Image), size, res.ContentType); err != nil {
			return answer{}, fmt.Errorf("store image: %w", err)
		}
		out.Image = &ImageOutput{ContentType: res.ContentType, Size: size}
	default:
		return answer{}, worker.Permanent(fmt.Errorf("kind %q: %w", task.Kind, ErrKindUnsupported))
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return answer{}, fmt.Errorf("encode output: %w", err)
	}
	ans.output = raw
	return ans, nil
}

// settle turns the outcome of run into the job's outcome: a finished task is success; a
// retryable error is returned for a retry; otherwise the failure is recorded (task failed,
// its ledger row, operation failed, with a client-safe code) and the error is returned as
// permanent.
func (h *Handler) settle(ctx context.Context, job worker.Job, ev domain.AITaskRequested, billed billing, err error, log *slog.Logger) error {
	if errors.Is(err, worker.ErrSkip) {
		log.InfoContext(ctx, "ai task already finished: nothing to do")
		return nil
	}
	err = fmt.Errorf("aitask: task %s: %w", ev.AITaskID, err)
	if errors.Is(err, domain.ErrAITaskNotFound) {
		log.WarnContext(ctx, "ai task not found")
		return worker.Permanent(err)
	}
	if !worker.GiveUp(job, err) {
		log.WarnContext(ctx, "ai task failed; it will be retried", slog.String("error", err.Error()))
		return err
	}
	f := worker.FailureOf(err)
	d := h.cfg.Deps
	recErr := d.Step(ctx, job, func(ctx context.Context) error {
		t, err := worker.FailTask(ctx, d, h.cfg.Tasks, ev.AITaskID, taskOf, f)
		if err != nil {
			return err
		}
		_, err = h.cfg.Ledger.Record(ctx, t, billed.usage, billed.model)
		return err
	})
	if recErr != nil && !errors.Is(recErr, worker.ErrSkip) {
		log.ErrorContext(ctx, "ai task failure could not be recorded", slog.String("error", err.Error()),
			slog.String("record_error", recErr.Error()))
		// Not permanent: a retry records it (or succeeds).
		return fmt.Errorf("%v; record failure: %w", err, recErr)
	}
	log.WarnContext(ctx, "ai task failed", slog.String("code", f.Code), slog.String("error", err.Error()))
	return worker.Permanent(err)
}

// taskOf gives worker.BeginTask and worker.FailTask the task state it embeds.
func taskOf(t *domain.AITask) *domain.Task { return &t.Task }
