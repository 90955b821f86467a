package mediaproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sync/semaphore"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Info, Variant, InspectFunc and Inspected are the image inspector's port (port.InspectImageFunc).
type (
	Info        = port.ImageInfo
	Variant     = port.ImageVariant
	InspectFunc = port.InspectImageFunc
	Inspected   = port.InspectedImage
)

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

// Config configures New. Every field is required but Decodes.
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
	// InspectFunc validates and decodes the original (infra/imaging.Inspect, whose Image
	// derives the default variants).
	InspectFunc InspectFunc
	// Decodes bounds how many originals the Handler holds decoded at once, from the read
	// of the original to the last variant derived; other deliveries wait for a slot. A
	// process builds one Handler, so this is the process's bound on decode memory
	// (Decodes × the decode budget and the deriver's work). 0 means 1.
	Decodes int
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
	case c.InspectFunc == nil:
		return errors.New("mediaproc: InspectFunc is required")
	case c.Decodes < 0:
		return errors.New("mediaproc: Decodes must not be negative")
	}
	return nil
}

// Handler handles domain.MediaUploadCompleted jobs of worker.QueueMediaProcessing through
// the task lifecycle (worker.Flow). It is safe for concurrent use; see the package
// documentation for its contract.
type Handler struct {
	cfg     Config
	decodes *semaphore.Weighted
	flow    worker.Flow[domain.MediaTask, domain.Media, result]
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mediaproc.New: %w", err)
	}
	h := &Handler{cfg: cfg, decodes: semaphore.NewWeighted(int64(max(cfg.Decodes, 1)))}
	h.flow = worker.Flow[domain.MediaTask, domain.Media, result]{Kind: Tasks(cfg.Deps, cfg.Tasks, cfg.Media),
		Begin: func(ctx context.Context, t *domain.MediaTask) (domain.Media, error) {
			return cfg.Media.Get(ctx, t.MediaID)
		},
		Call: func(ctx context.Context, _ domain.MediaTask, m domain.Media, _ worker.Tx) (result, error) {
			return h.process(ctx, m)
		},
		Record: h.record}
	return h, nil
}

// Handle implements worker.Handler.
func (h *Handler) Handle(ctx context.Context, job worker.Job) error { return h.flow.Handle(ctx, job) }

// result is what the processing outside the transactions found.
type result struct {
	info     Info
	variants []domain.MediaVariant
}

// record makes the media ready with its variants and publishes media.ready (record step).
func (h *Handler) record(ctx context.Context, t *domain.MediaTask, res result) (any, error) {
	now := h.cfg.Deps.Now()
	made := false
	_, err := h.cfg.Media.Update(ctx, t.MediaID, func(m *domain.Media) error {
		if m.Status == domain.MediaReady || m.Status == domain.MediaRejected {
			return nil
		}
		m.Status, m.SniffedType, m.Width, m.Height = domain.MediaReady, res.info.ContentType, res.info.Width, res.info.Height
		m.Variants, m.RejectReason, m.UpdatedAt = res.variants, "", now
		made = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if made {
		if err := h.cfg.Deps.Events.Publish(ctx, domain.MediaProcessed{MediaID: t.MediaID, OperationID: t.OperationID,
			ContentType: res.info.ContentType, Width: res.info.Width, Height: res.info.Height, Variants: res.variants}); err != nil {
			return nil, err
		}
	}
	return map[string]any{"media_id": t.MediaID, "variants": len(res.variants)}, nil
}

// process validates the original of m, derives its variants and stores them, holding a
// decode slot from the read of the original until the variants are derived. Its errors
// are *domain.Error values without causes (no storage key or path reaches a caller), or
// internal errors of the deriver.
func (h *Handler) process(ctx context.Context, m domain.Media) (result, error) {
	if err := h.decodes.Acquire(ctx, 1); err != nil {
		return result{}, fmt.Errorf("wait for a decode slot: %w", err)
	}
	info, derived, err := h.decode(ctx, m)
	h.decodes.Release(1)
	if err != nil {
		return result{}, err
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

// decode reads the original of m, checks it against m and derives its variants.
func (h *Handler) decode(ctx context.Context, m domain.Media) (Info, []Variant, error) {
	rc, oi, err := h.cfg.Storage.Get(ctx, domain.MediaObjectKey(m.WorkspaceID, m.ID))
	if errors.Is(err, port.ErrObjectNotFound) {
		return Info{}, nil, domain.ErrMediaNotUploaded
	}
	if err != nil {
		return Info{}, nil, scrub(err, "get original")
	}
	defer rc.Close()
	if oi.Size > h.cfg.MaxBytes {
		return Info{}, nil, domain.ErrMediaTooLarge.WithMessage("the media is larger than %d bytes", h.cfg.MaxBytes)
	}
	if oi.Size >= 0 && oi.Size != m.Size {
		return Info{}, nil, ErrSizeMismatch
	}
	img, err := h.cfg.InspectFunc(rc, h.cfg.MaxBytes)
	if err != nil {
		return Info{}, nil, scrub(err, "inspect")
	}
	if int64(len(img.Data)) != m.Size {
		return Info{}, nil, ErrSizeMismatch
	}
	if !slices.Contains(domain.AllowedMediaTypes, img.Info.ContentType) {
		return Info{}, nil, domain.ErrMediaTypeUnsupported
	}
	if img.Info.ContentType != m.ContentType {
		return Info{}, nil, ErrTypeMismatch
	}
	derived, err := img.DeriveFunc()
	if err != nil {
		var de *domain.Error
		if errors.As(err, &de) {
			return Info{}, nil, de.WithCause(nil)
		}
		return Info{}, nil, fmt.Errorf("derive: %w", err)
	}
	return img.Info, derived, nil
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

// taskOf gives worker.Kind the task state it embeds.
func taskOf(t *domain.MediaTask) *domain.Task { return &t.Task }
