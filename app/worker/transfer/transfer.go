package transfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// OpMediaProcessing is the type of the media processing operation a transfer starts. It is
// the value of domain.OpMediaProcessing (a worker does not import the command layer).
const OpMediaProcessing = "media.processing"

// SourceMedia is the domain.Media Source of a transferred media.
const SourceMedia = "transfer"

// ErrSourceEmpty: the source answered with no bytes. Permanent.
var ErrSourceEmpty = port.ErrSourceRejected.WithMessage("the source is empty")

// Config configures New. Every field is required.
type Config struct {
	// Deps are the worker's transaction, operations, events, clock and logger.
	Deps worker.Deps
	// Transfers stores the transfers (postgres.NewMaterialTransfers).
	Transfers port.Repository[domain.MaterialTransfer]
	// Media stores the media (postgres.NewMedia).
	Media port.Repository[domain.Media]
	// MediaTasks stores the media processing tasks (postgres.NewMediaTasks).
	MediaTasks port.Repository[domain.MediaTask]
	// Storage receives the bytes.
	Storage port.ObjectStorage
	// Fetcher downloads the source with the SSRF guard (infra/fetch).
	Fetcher port.Fetcher
	// MaxBytes bounds a transferred object; use the media size bound, so that the media
	// processing accepts what the transfer stored.
	MaxBytes int64
}

// Validate reports the first missing field.
func (c Config) Validate() error {
	switch {
	case c.Deps.Tx == nil || c.Deps.Operations == nil || c.Deps.Events == nil || c.Deps.Now == nil || c.Deps.Log == nil:
		return errors.New("transfer: Deps (Tx, Operations, Events, Now, Log) are required")
	case c.Transfers == nil || c.Media == nil || c.MediaTasks == nil:
		return errors.New("transfer: Transfers, Media and MediaTasks are required")
	case c.Storage == nil || c.Fetcher == nil:
		return errors.New("transfer: Storage and Fetcher are required")
	case c.MaxBytes <= 0:
		return errors.New("transfer: MaxBytes must be positive")
	}
	return nil
}

// Handler handles domain.MaterialTransferRequested jobs of worker.QueueMaterialTransfer
// through the task lifecycle (worker.Flow). It is safe for concurrent use; see the package
// documentation for its contract.
type Handler struct {
	cfg  Config
	flow worker.Flow[domain.MaterialTransfer, struct{}, stored]
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("transfer.New: %w", err)
	}
	h := &Handler{cfg: cfg}
	h.flow = worker.Flow[domain.MaterialTransfer, struct{}, stored]{Kind: Tasks(cfg.Deps, cfg.Transfers),
		Call: func(ctx context.Context, t domain.MaterialTransfer, _ struct{}, tx worker.Tx) (stored, error) {
			return h.store(ctx, t, tx)
		},
		Record: h.record}
	return h, nil
}

// Handle implements worker.Handler.
func (h *Handler) Handle(ctx context.Context, job worker.Job) error { return h.flow.Handle(ctx, job) }

// ProcessingIDs returns the ids of the media processing task and operation a transfer
// starts: fixed by the transfer, so a repeated Step B inserts nothing new.
func ProcessingIDs(transferID uuid.UUID) (taskID, operationID uuid.UUID) {
	return uuid.NewSHA1(transferID, []byte("media.processing/task")),
		uuid.NewSHA1(transferID, []byte("media.processing/operation"))
}

// stored describes the object the transfer wrote.
type stored struct {
	bytes       int64
	contentType string
	downloaded  bool
}

// record stores the object's size on the transfer, creates the media and starts its
// processing (record step).
func (h *Handler) record(ctx context.Context, t *domain.MaterialTransfer, obj stored) (any, error) {
	t.Stored, t.Bytes = true, obj.bytes
	taskID, procOpID := ProcessingIDs(t.ID)
	if err := h.createMedia(ctx, *t, obj, taskID, procOpID); err != nil {
		return nil, err
	}
	return map[string]any{"transfer_id": t.ID, "media_id": t.MediaID, "bytes": obj.bytes,
		"processing_operation_id": procOpID}, nil
}

// createMedia inserts the media, its processing operation and task, and publishes the
// events that start the processing. It runs in the record step; each insert that finds its
// row already there is taken as done.
func (h *Handler) createMedia(ctx context.Context, t domain.MaterialTransfer, obj stored, taskID, procOpID uuid.UUID) error {
	d := h.cfg.Deps
	now := d.Now()
	transferOp, err := d.Operations.Get(ctx, t.OperationID)
	if err != nil {
		return err
	}
	m := domain.Media{ID: t.MediaID, WorkspaceID: t.WorkspaceID, Filename: filename(t.SourceURL),
		ContentType: obj.contentType, Size: obj.bytes, Status: domain.MediaProcessing, Source: SourceMedia,
		CreatedAt: now, UpdatedAt: now}
	if err := h.cfg.Media.Insert(ctx, m); err != nil && !errors.Is(err, domain.ErrConflict) {
		return err
	}
	var events []domain.Event
	procOp := domain.NewOperation(t.WorkspaceID, transferOp.CreatedBy, OpMediaProcessing, "media", m.ID, now)
	procOp.ID = procOpID
	switch err := d.Operations.Insert(ctx, procOp); {
	case err == nil:
		events = append(events, procOp.StatusChanged())
	case !errors.Is(err, domain.ErrConflict):
		return err
	}
	task := domain.MediaTask{Task: domain.NewTask(taskID, t.WorkspaceID, procOpID, now), MediaID: m.ID}
	switch err := h.cfg.MediaTasks.Insert(ctx, task); {
	case err == nil:
		events = append(events, task.RequestEvent())
	case !errors.Is(err, domain.ErrConflict) && !errors.Is(err, domain.ErrMediaAlreadyComplete):
		return err
	}
	return d.Events.Publish(ctx, events...)
}

// store makes sure the transfer's object exists and describes it: an object already stored
// under the key (by a delivery that crashed before recording) is used as is; otherwise the
// source is downloaded into it, its progress (bytes read, of the source's length when it
// said it) reported on the operation at most once a second, each report in a transaction
// of its own (tx).
func (h *Handler) store(ctx context.Context, t domain.MaterialTransfer, tx worker.Tx) (stored, error) {
	key := domain.MediaObjectKey(t.WorkspaceID, t.MediaID)
	info, err := h.cfg.Storage.Stat(ctx, key)
	switch {
	case err == nil && info.Size > 0:
		if info.Size > h.cfg.MaxBytes {
			return stored{}, port.ErrSourceTooLarge.WithMessage("the source is larger than the %d bytes allowed", h.cfg.MaxBytes)
		}
		return stored{bytes: info.Size, contentType: info.ContentType}, nil
	case err != nil && !errors.Is(err, port.ErrObjectNotFound):
		return stored{}, scrub(err, "stat object")
	}

	body, finfo, err := h.cfg.Fetcher.Fetch(ctx, t.SourceURL, h.cfg.MaxBytes)
	if err != nil {
		return stored{}, scrub(err, "fetch")
	}
	defer body.Close()
	br := bufio.NewReaderSize(body, 512)
	head, err := br.Peek(512)
	if err != nil && !errors.Is(err, io.EOF) {
		return stored{}, scrub(err, "fetch")
	}
	ct := sniff(head)
	size := finfo.Size
	if size < 0 || size > h.cfg.MaxBytes {
		size = -1 // the fetcher enforces MaxBytes while reading
	}
	var total *int64
	if size >= 0 {
		total = &size
	}
	var gate worker.ProgressGate
	cr := &countingReader{r: br, progress: func(n int64) {
		if !gate.Due(h.cfg.Deps.Now()) {
			return
		}
		err := tx(ctx, func(ctx context.Context) error {
			return h.cfg.Deps.ReportProgress(ctx, t.OperationID, domain.Progress{Done: n, Total: total})
		})
		if err != nil && ctx.Err() == nil {
			// Progress is for people watching: a report that fails leaves the last one.
			h.cfg.Deps.Log.Warn("transfer: progress not recorded", "operation_id", t.OperationID.String(), "err", err)
		}
	}}
	if err := h.cfg.Storage.Put(ctx, key, cr, size, ct); err != nil {
		return stored{}, scrub(err, "store")
	}
	if cr.n == 0 {
		return stored{}, ErrSourceEmpty
	}
	return stored{bytes: cr.n, contentType: ct, downloaded: true}, nil
}

// sniff returns the media type of the first bytes, parameters removed.
func sniff(head []byte) string {
	ct := http.DetectContentType(head)
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		return mt
	}
	return ct
}

// filename derives a media filename from the source URL's last path segment
// (domain.SanitizeFilename); "transfer" when it has none.
func filename(sourceURL string) string {
	name := ""
	if u, err := url.Parse(sourceURL); err == nil {
		name = domain.SanitizeFilename(u.Path)
	}
	if name == "" {
		return "transfer"
	}
	return name
}

// countingReader counts the bytes read through it and tells progress (when set) the count
// after each read.
type countingReader struct {
	r        io.Reader
	n        int64
	progress func(n int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if n > 0 && c.progress != nil {
		c.progress(c.n)
	}
	return n, err
}

// scrub keeps the code, kind and client message of a fetcher or storage error and drops
// its cause, whose text may hold an address, a URL or a storage path. An error that is not
// a domain error is a transient storage failure.
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
func taskOf(t *domain.MaterialTransfer) *domain.Task { return &t.Task }
