package productsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// DefaultPageSize is the number of products asked for per page when Config.PageSize is 0.
const DefaultPageSize = 50

// ErrPaginationInvalid: the marketplace answered a page with the token it was asked for, so
// following it would never end. Permanent.
var ErrPaginationInvalid = domain.NewError(domain.KindInternal, "PLATFORM_PAGINATION_INVALID",
	"the marketplace returned an invalid page token")

// Config configures New.
type Config struct {
	// Deps are the worker's shared dependencies. Tx, Operations and Events are required;
	// Now defaults to time.Now and Log to slog.Default().
	Deps worker.Deps
	// Syncs stores the product syncs and the synced platform products. Required.
	Syncs port.ProductSyncs
	// Stores gives the store's status and sealed credentials. Required.
	Stores port.Stores
	// Cipher opens the sealed credentials. Required.
	Cipher port.CredentialCipher
	// Marketplace is the gateway the products are listed from. Required.
	Marketplace port.Marketplace
	// PageSize is the number of products asked for per page. Default DefaultPageSize.
	PageSize int
}

func (c *Config) setDefaults() {
	if c.Deps.Now == nil {
		c.Deps.Now = time.Now
	}
	if c.Deps.Log == nil {
		c.Deps.Log = slog.Default()
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
}

// Validate reports the first missing or invalid field without changing c.
func (c Config) Validate() error {
	switch {
	case c.Deps.Tx == nil || c.Deps.Operations == nil || c.Deps.Events == nil:
		return errors.New("productsync: Deps.Tx, Deps.Operations and Deps.Events are required")
	case c.Syncs == nil || c.Stores == nil || c.Cipher == nil || c.Marketplace == nil:
		return errors.New("productsync: Syncs, Stores, Cipher and Marketplace are required")
	case c.PageSize < 0:
		return errors.New("productsync: PageSize must not be negative")
	}
	return nil
}

// Handler handles the jobs of the product-sync queue (worker.QueueProductSync). Safe for
// concurrent use; see the package comment for its contract.
type Handler struct {
	cfg Config
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("productsync.New: %w", err)
	}
	return &Handler{cfg: cfg}, nil
}

// Result is what a finished sync reports in its operation's result.
type Result struct {
	SyncID uuid.UUID `json:"sync_id"`
	Pages  int       `json:"pages"`
	Items  int       `json:"items"`
}

// errMoved: the sync is no longer where this delivery fetched its page from (another
// delivery recorded that page); nothing was written.
var errMoved = errors.New("productsync: the sync moved on")

// position is where a page is fetched from: the saved next page token and pages done.
type position struct {
	token string
	pages int
}

// Handle runs the sync of a domain.ProductSyncRequested job (see the package comment).
func (h *Handler) Handle(ctx context.Context, job worker.Job) error {
	var ev domain.ProductSyncRequested
	if err := job.Decode(&ev); err != nil {
		return err
	}
	log := h.cfg.Deps.Log.With(slog.String("job_id", job.ID), slog.String("workspace_id", job.WorkspaceID.String()),
		slog.String("sync_id", ev.SyncID.String()), slog.Int("attempt", job.Attempt))
	res, err := h.run(ctx, job, ev, log)
	if err == nil {
		log.InfoContext(ctx, "product sync finished", slog.Int("pages", res.Pages), slog.Int("items", res.Items))
		return nil
	}
	return h.settle(ctx, job, ev, err, log)
}

// run starts the sync and records pages until the last one. It returns worker.ErrSkip when
// the sync is finished (by an earlier or a concurrent delivery).
func (h *Handler) run(ctx context.Context, job worker.Job, ev domain.ProductSyncRequested, log *slog.Logger) (Result, error) {
	d := h.cfg.Deps
	var sync domain.ProductSync
	var sealed port.SealedCredentials
	err := d.Step(ctx, job, func(ctx context.Context) error {
		s, err := worker.BeginTask(ctx, d, h.cfg.Syncs, ev.SyncID, taskOf)
		if err != nil {
			return err
		}
		sync = s
		store, err := h.cfg.Stores.Get(ctx, s.StoreID)
		if err != nil {
			return err
		}
		if store.Status != domain.StoreVerified {
			return domain.ErrStoreNotVerified
		}
		sealed, _, err = h.cfg.Stores.Credentials(ctx, s.StoreID)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	creds, err := worker.OpenCredentials(h.cfg.Cipher, sync.WorkspaceID, sync.StoreID, sealed)
	if err != nil {
		return Result{}, err
	}

	pos := position{token: sync.NextPageToken, pages: sync.PagesDone}
	for {
		page, err := h.cfg.Marketplace.ListProducts(ctx, creds, h.cfg.PageSize, pos.token)
		if err != nil {
			return Result{}, fmt.Errorf("list page %d: %w", pos.pages+1, err)
		}
		if page.NextPageToken != "" && page.NextPageToken == pos.token {
			return Result{}, worker.Permanent(fmt.Errorf("list page %d: %w", pos.pages+1, ErrPaginationInvalid))
		}
		var cur domain.ProductSync
		err = d.Step(ctx, job, func(ctx context.Context) error {
			var err error
			cur, err = h.record(ctx, sync.ID, pos, page)
			if err != nil {
				return err
			}
			if cur.Status != domain.TaskSucceeded {
				return nil
			}
			return d.SucceedOperation(ctx, cur.OperationID, Result{SyncID: cur.ID, Pages: cur.PagesDone, Items: cur.ItemsSynced})
		})
		switch {
		case errors.Is(err, errMoved):
			// Another delivery recorded this page: go on from where the database is.
			log.DebugContext(ctx, "page already recorded by another delivery", slog.Int("pages_done", cur.PagesDone))
			pos = position{token: cur.NextPageToken, pages: cur.PagesDone}
			continue
		case err != nil:
			return Result{}, fmt.Errorf("record page %d: %w", pos.pages+1, err)
		}
		if cur.Status == domain.TaskSucceeded {
			return Result{SyncID: cur.ID, Pages: cur.PagesDone, Items: cur.ItemsSynced}, nil
		}
		pos = position{token: cur.NextPageToken, pages: cur.PagesDone}
	}
}

// record saves one page fetched from pos, with compare-and-set on pos. It must run in a
// Step. When the sync moved on since, it writes nothing and returns errMoved with the sync
// as it is; when the sync is finished, worker.ErrSkip.
func (h *Handler) record(ctx context.Context, id uuid.UUID, pos position, page port.ProductPage) (domain.ProductSync, error) {
	now := h.cfg.Deps.Now()
	var current domain.ProductSync
	s, err := h.cfg.Syncs.Update(ctx, id, func(s *domain.ProductSync) error {
		if s.Status.Terminal() {
			return worker.ErrSkip
		}
		if s.NextPageToken != pos.token || s.PagesDone != pos.pages {
			current = *s
			return errMoved
		}
		s.NextPageToken = page.NextPageToken
		s.PagesDone++
		s.ItemsSynced += len(page.Items)
		s.UpdatedAt = now
		s.Version++
		if page.NextPageToken == "" {
			return s.Succeed(now)
		}
		return nil
	})
	if errors.Is(err, errMoved) {
		return current, err
	}
	if err != nil {
		return s, err
	}
	if len(page.Items) > 0 {
		if err := h.cfg.Syncs.UpsertPlatformProducts(ctx, s.StoreID, s.ID, page.Items); err != nil {
			return s, err
		}
	}
	return s, nil
}

// settle turns the outcome of run into the job's outcome: a finished sync is success; a
// retryable error is returned for a retry; otherwise the failure is recorded (sync and
// operation failed, with a client-safe code) and the error is returned as permanent.
func (h *Handler) settle(ctx context.Context, job worker.Job, ev domain.ProductSyncRequested, err error, log *slog.Logger) error {
	if errors.Is(err, worker.ErrSkip) {
		log.InfoContext(ctx, "product sync already finished: nothing to do")
		return nil
	}
	err = fmt.Errorf("productsync: sync %s: %w", ev.SyncID, err)
	if errors.Is(err, domain.ErrProductSyncNotFound) {
		log.WarnContext(ctx, "product sync not found")
		return worker.Permanent(err)
	}
	if !worker.GiveUp(job, err) {
		log.WarnContext(ctx, "product sync failed; it will be retried", slog.String("error", err.Error()))
		return err
	}
	f := worker.FailureOf(err)
	d := h.cfg.Deps
	recErr := d.Step(ctx, job, func(ctx context.Context) error {
		_, err := worker.FailTask(ctx, d, h.cfg.Syncs, ev.SyncID, taskOf, f)
		return err
	})
	if recErr != nil && !errors.Is(recErr, worker.ErrSkip) {
		log.ErrorContext(ctx, "product sync failure could not be recorded", slog.String("error", err.Error()),
			slog.String("record_error", recErr.Error()))
		// Not permanent: a retry records it (or succeeds).
		return fmt.Errorf("%v; record failure: %w", err, recErr)
	}
	log.WarnContext(ctx, "product sync failed", slog.String("code", f.Code), slog.String("error", err.Error()))
	return worker.Permanent(err)
}

// taskOf gives worker.BeginTask and worker.FailTask the task state it embeds.
func taskOf(s *domain.ProductSync) *domain.Task { return &s.Task }
