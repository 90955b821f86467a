package mediaproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Info describes an inspected image (the shape of infra/imaging.Info).
type Info struct {
	// ContentType is sniffed from the content.
	ContentType string
	Width       int
	Height      int
	// Size is the number of bytes read.
	Size int64
}

// Variant is a derived image and its encoded bytes (the shape of infra/imaging.Derived).
// Variant.Name must be usable as a path segment of an object key.
type Variant struct {
	Variant domain.MediaVariant
	Bytes   []byte
}

// InspectFunc reads at most maxBytes+1 bytes of r, validates the image they hold and returns
// its description and the bytes. Invalid content is a *domain.Error of a non-transient kind
// (too large, unsupported type, corrupt); other errors are read errors.
type InspectFunc func(r io.Reader, maxBytes int64) (Info, []byte, error)

// DeriveFunc derives the variants of an inspected image, deterministically: the same bytes
// give the same variants, in the same order.
type DeriveFunc func(data []byte) ([]Variant, error)

// VariantContentType is the content type of every stored variant.
const VariantContentType = "image/jpeg"

// Error codes of this flow beyond those of domain and the inspector.
var (
	// ErrSizeMismatch: the stored bytes are not as many as the client declared.
	ErrSizeMismatch = domain.NewError(domain.KindInvalid, "MEDIA_SIZE_MISMATCH",
		"the uploaded bytes do not match the declared size")
	// ErrTypeMismatch: the sniffed type differs from the declared content_type.
	ErrTypeMismatch = domain.NewError(domain.KindInvalid, "MEDIA_TYPE_MISMATCH",
		"the uploaded image's type does not match the declared content_type")
)

// Config configures New. Every field is required.
type Config struct {
	// Deps are the worker's transaction, operations, events, clock and logger.
	Deps worker.Deps
	// Tasks stores the media processing tasks (postgres.NewMediaTasks).
	Tasks port.Repository[domain.MediaTask]
	// Media stores the media (postgres.NewMedia).
	Media port.Repository[domain.Media]
	// Storage holds the originals and receives the variants.
	Storage port.ObjectStorage
	// MaxBytes bounds a media's size (the same bound the upload command enforces).
	MaxBytes int64
	// InspectFunc validates the original (infra/imaging.Inspect).
	InspectFunc InspectFunc
	// DeriveFunc derives the variants (infra/imaging.Derive with its default variants).
	DeriveFunc DeriveFunc
}

// Validate reports the first missing field.
func (c Config) Validate() error {
	switch {
	case c.Deps.Tx == nil || c.Deps.Operations == nil || c.Deps.Events == nil || c.Deps.Now == nil || c.Deps.Log == nil:
		return errors.New("mediaproc: Deps (Tx, Operations, Events, Now, Log) are required")
	case c.Tasks == nil || c.Media == nil:
		return errors.New("mediaproc: Tasks and Media are required")
	case c.Storage == nil:
		return errors.New("mediaproc: Storage is required")
	case c.MaxBytes <= 0:
		return errors.New("mediaproc: MaxBytes must be positive")
	case c.InspectFunc == nil || c.DeriveFunc == nil:
		return errors.New("mediaproc: InspectFunc and DeriveFunc are required")
	}
	return nil
}

// Handler handles domain.MediaUploadCompleted jobs of worker.QueueMediaProcessing. It is
// safe for concurrent use; see the package documentation for its contract.
type Handler struct {
	cfg Config
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mediaproc.New: %w", err)
	}
	return &Handler{cfg: cfg}, nil
}

// result is what the processing outside the transactions found.
type result struct {
	info     Info
	variants []domain.MediaVariant
}

// Handle implements worker.Handler.
func (h *Handler) Handle(ctx context.Context, job worker.Job) error {
	const op = "mediaproc.Handle"
	d := h.cfg.Deps
	var ev domain.MediaUploadCompleted
	if err := job.Decode(&ev); err != nil {
		return err
	}
	log := d.Log.With(slog.String("job_id", job.ID), slog.String("workspace_id", job.WorkspaceID.String()),
		slog.String("media_id", ev.MediaID.String()), slog.String("processing_id", ev.ProcessingID.String()))

	// Step A: start the task and the operation, read the media.
	var task domain.MediaTask
	var media domain.Media
	err := d.Step(ctx, job, func(ctx context.Context) error {
		t, err := worker.BeginTask(ctx, d, h.cfg.Tasks, ev.ProcessingID, taskOf)
		if err != nil {
			return err
		}
		m, err := h.cfg.Media.Get(ctx, t.MediaID)
		if err != nil {
			return err
		}
		task, media = t, m
		return nil
	})
	switch {
	case errors.Is(err, worker.ErrSkip):
		log.InfoContext(ctx, "media processing already finished; nothing to do")
		return nil
	case err != nil && port.IsPermanent(err):
		// The task or its media does not exist (in this workspace): nothing to record.
		return worker.Permanent(fmt.Errorf("%s: start: %w", op, err))
	case err != nil:
		return fmt.Errorf("%s: start: %w", op, err)
	}

	// Outside any transaction: validate, derive, store.
	res, err := h.process(ctx, media)
	if err != nil {
		if !worker.GiveUp(job, err) {
			log.WarnContext(ctx, "media processing failed; will retry", slog.Int("attempt", job.Attempt),
				slog.String("error_code", worker.FailureOf(err).Code))
			return fmt.Errorf("%s: %w", op, err)
		}
		return h.fail(ctx, job, log, task, err)
	}

	// Step B: record the result with compare-and-set.
	err = d.Step(ctx, job, func(ctx context.Context) error {
		t, err := h.cfg.Tasks.Update(ctx, task.ID, func(t *domain.MediaTask) error {
			if t.Status.Terminal() {
				return worker.ErrSkip
			}
			return t.Succeed(d.Now())
		})
		if err != nil {
			return err
		}
		if _, err := h.cfg.Media.Update(ctx, t.MediaID, func(m *domain.Media) error {
			if m.Status == domain.MediaReady || m.Status == domain.MediaRejected {
				return nil
			}
			m.Status, m.SniffedType, m.Width, m.Height = domain.MediaReady, res.info.ContentType, res.info.Width, res.info.Height
			m.Variants, m.RejectReason, m.UpdatedAt = res.variants, "", d.Now()
			return nil
		}); err != nil {
			return err
		}
		return d.SucceedOperation(ctx, t.OperationID, map[string]any{"media_id": t.MediaID, "variants": len(res.variants)})
	})
	switch {
	case errors.Is(err, worker.ErrSkip):
		log.InfoContext(ctx, "media processing finished by another delivery")
		return nil
	case err != nil:
		return fmt.Errorf("%s: record: %w", op, err)
	}
	log.InfoContext(ctx, "media ready", slog.Int("variants", len(res.variants)), slog.Int("attempt", job.Attempt))
	return nil
}

// fail records a final failure: task failed, media rejected with the failure's code,
// operation failed. It returns the permanent error the job ends with.
func (h *Handler) fail(ctx context.Context, job worker.Job, log *slog.Logger, task domain.MediaTask, cause error) error {
	const op = "mediaproc.Handle"
	d := h.cfg.Deps
	f := worker.FailureOf(cause)
	kind := Tasks(d, h.cfg.Tasks, h.cfg.Media)
	err := d.Step(ctx, job, func(ctx context.Context) error { return kind.Fail(ctx, task.ID, f) })
	switch {
	case errors.Is(err, worker.ErrSkip):
		log.InfoContext(ctx, "media processing finished by another delivery")
		return nil
	case err != nil:
		// Not recorded: let the queue deliver again (the task is still running).
		return fmt.Errorf("%s: record failure %s: %w", op, f.Code, err)
	}
	log.WarnContext(ctx, "media rejected", slog.String("error_code", f.Code), slog.Int("attempt", job.Attempt))
	return worker.Permanent(fmt.Errorf("%s: %w", op, cause))
}

// process validates the original of m, derives its variants and stores them. Its errors
// are *domain.Error values without causes (no storage key or path reaches a caller), or
// internal errors of the deriver.
func (h *Handler) process(ctx context.Context, m domain.Media) (result, error) {
	rc, oi, err := h.cfg.Storage.Get(ctx, domain.MediaObjectKey(m.WorkspaceID, m.ID))
	if errors.Is(err, port.ErrObjectNotFound) {
		return result{}, domain.ErrMediaNotUploaded
	}
	if err != nil {
		return result{}, scrub(err, "get original")
	}
	defer rc.Close()
	if oi.Size > h.cfg.MaxBytes {
		return result{}, domain.ErrMediaTooLarge.WithMessage("the media is larger than %d bytes", h.cfg.MaxBytes)
	}
	if oi.Size >= 0 && oi.Size != m.Size {
		return result{}, ErrSizeMismatch
	}
	info, data, err := h.cfg.InspectFunc(rc, h.cfg.MaxBytes)
	if err != nil {
		return result{}, scrub(err, "inspect")
	}
	if int64(len(data)) != m.Size {
		return result{}, ErrSizeMismatch
	}
	if !slices.Contains(domain.AllowedMediaTypes, info.ContentType) {
		return result{}, domain.ErrMediaTypeUnsupported
	}
	if info.ContentType != m.ContentType {
		return result{}, ErrTypeMismatch
	}
	derived, err := h.cfg.DeriveFunc(data)
	if err != nil {
		var de *domain.Error
		if errors.As(err, &de) {
			return result{}, de.WithCause(nil)
		}
		return result{}, fmt.Errorf("derive: %w", err)
	}
	variants := make([]domain.MediaVariant, 0, len(derived))
	for _, v := range derived {
		key := domain.MediaVariantKey(m.WorkspaceID, m.ID, v.Variant.Name)
		if err := h.cfg.Storage.Put(ctx, key, bytes.NewReader(v.Bytes), int64(len(v.Bytes)), VariantContentType); err != nil {
			return result{}, scrub(err, "put variant "+v.Variant.Name)
		}
		variants = append(variants, v.Variant)
	}
	return result{info: info, variants: variants}, nil
}

// scrub keeps the code, kind and client message of a storage or inspector error and drops
// its cause, whose text may hold a storage key or a file path. An error that is not a
// domain error is a read failure: transient.
func scrub(err error, what string) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	var de *domain.Error
	if errors.As(err, &de) {
		return fmt.Errorf("%s: %w", what, de.WithCause(nil))
	}
	return fmt.Errorf("%s: %w", what, port.ErrStorageUnavailable)
}

// taskOf gives worker.BeginTask and worker.FailTask the task state it embeds.
func taskOf(t *domain.MediaTask) *domain.Task { return &t.Task }
