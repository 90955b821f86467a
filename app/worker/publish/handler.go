package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// ErrCredentialsUnreadable is worker.ErrCredentialsUnreadable, recorded when the store's
// credentials cannot be opened.
var ErrCredentialsUnreadable = worker.ErrCredentialsUnreadable

// Config configures New. Every field is required.
type Config struct {
	// Deps gives the transactions (one per step), the operations, the outbox publisher,
	// the clock and the logger (Log may be nil: no logs).
	Deps worker.Deps
	// Publications stores the publications.
	Publications port.Repository[domain.Publication]
	// Products reads the product of a publication that has no snapshot (requested before
	// snapshots existed), to capture it; a publication with a snapshot never reads it.
	Products port.Products
	// Stores reads the store and its sealed credentials.
	Stores port.Stores
	// Cipher opens the sealed credentials.
	Cipher port.CredentialCipher
	// Marketplace is the gateway that creates the product.
	Marketplace port.Marketplace
}

// Validate reports the first missing field. It does not change c.
func (c Config) Validate() error {
	switch {
	case c.Deps.Tx == nil || c.Deps.Operations == nil || c.Deps.Events == nil || c.Deps.Now == nil:
		return errors.New("publish: Deps.Tx, Deps.Operations, Deps.Events and Deps.Now are required")
	case c.Publications == nil:
		return errors.New("publish: Publications is required")
	case c.Products == nil:
		return errors.New("publish: Products is required")
	case c.Stores == nil:
		return errors.New("publish: Stores is required")
	case c.Cipher == nil:
		return errors.New("publish: Cipher is required")
	case c.Marketplace == nil:
		return errors.New("publish: Marketplace is required")
	}
	return nil
}

// Handler handles the jobs of worker.QueueListingPublish (see the package comment). It is
// safe for concurrent use and serializes the jobs of one publication: use one Handler per
// process.
type Handler struct {
	cfg   Config
	log   *slog.Logger
	locks keyLock
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("publish.New: %w", err)
	}
	log := cfg.Deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, log: log}, nil
}

// Outcomes, as logged.
const (
	outcomeCreated     = "created"
	outcomeFound       = "found_existing"
	outcomeSkipped     = "skipped"
	outcomeRecorded    = "already_recorded"
	outcomeNotVerified = "store_not_verified"
	outcomeRevision    = "revision_unavailable"
	outcomeRetry       = "retry"
	outcomeFailed      = "failed"
	outcomeUnhandled   = "error"
)

// Handle implements worker.Handler.
func (h *Handler) Handle(ctx context.Context, job worker.Job) error {
	var ev domain.PublicationRequested
	if err := job.Decode(&ev); err != nil {
		h.log.ErrorContext(ctx, "publication: bad payload", slog.String("job_id", job.ID))
		return err
	}
	log := h.log.With(slog.String("job_id", job.ID), slog.String("workspace_id", job.WorkspaceID.String()),
		slog.String("publication_id", ev.PublicationID.String()), slog.Int("attempt", job.Attempt))

	unlock, err := h.locks.lock(ctx, ev.PublicationID)
	if err != nil {
		return fmt.Errorf("publish.Handle: %w", err)
	}
	defer unlock()

	outcome, err := h.run(ctx, job, ev)
	if err == nil {
		log.InfoContext(ctx, "publication", slog.String("outcome", outcome))
		return nil
	}
	if outcome == outcomeNotVerified || outcome == outcomeRevision {
		log.WarnContext(ctx, "publication", slog.String("outcome", outcome))
		return fmt.Errorf("publish.Handle: %w", err)
	}
	if !worker.GiveUp(job, err) {
		log.WarnContext(ctx, "publication", slog.String("outcome", outcomeRetry), slog.String("error", err.Error()))
		return fmt.Errorf("publish.Handle: %w", err)
	}
	failure := worker.FailureOf(err)
	if ferr := h.fail(ctx, job, ev.PublicationID, ev.OperationID, failure); ferr != nil {
		log.ErrorContext(ctx, "publication", slog.String("outcome", outcomeUnhandled),
			slog.String("error", err.Error()), slog.String("record_error", ferr.Error()))
		if !job.LastAttempt {
			// The failure is not recorded: let BullMQ retry the whole job.
			return fmt.Errorf("publish.Handle: record failure: %w", ferr)
		}
		return worker.Permanent(fmt.Errorf("publish.Handle: %w", errors.Join(err, ferr)))
	}
	log.WarnContext(ctx, "publication", slog.String("outcome", outcomeFailed),
		slog.String("code", failure.Code), slog.String("error", err.Error()))
	return worker.Permanent(fmt.Errorf("publish.Handle: %w", err))
}

// started is what Step A hands to the external call.
type started struct {
	publication domain.Publication
	input       port.ProductInput
	sealed      port.SealedCredentials
}

func (h *Handler) run(ctx context.Context, job worker.Job, ev domain.PublicationRequested) (string, error) {
	s, refused, err := h.start(ctx, job, ev)
	switch {
	case errors.Is(err, worker.ErrSkip):
		return outcomeSkipped, nil
	case err != nil:
		return "", err
	case refused == domain.ErrStoreNotVerified:
		return outcomeNotVerified, worker.Permanent(refused)
	case refused != nil:
		return outcomeRevision, worker.Permanent(refused)
	}
	product, outcome, err := h.publish(ctx, job, s)
	if err != nil {
		return "", err
	}
	recorded, existing, err := h.record(ctx, job, s.publication.ID, product)
	if err != nil {
		return "", err
	}
	if !recorded {
		if existing != "" && existing != product.ID {
			// Only two overlapping deliveries against a gateway that ignores
			// Idempotency-Key get here (see the package comment).
			h.log.ErrorContext(ctx, "publication: the platform holds a second product for this publication",
				slog.String("job_id", job.ID), slog.String("publication_id", s.publication.ID.String()),
				slog.String("recorded_external_product_id", existing), slog.String("extra_external_product_id", product.ID))
		}
		return outcomeRecorded, nil
	}
	return outcome, nil
}

// start is Step A. It reports the refusal when it failed the publication instead of
// starting it: domain.ErrStoreNotVerified or domain.ErrProductRevisionUnavailable.
func (h *Handler) start(ctx context.Context, job worker.Job, ev domain.PublicationRequested) (started, *domain.Error, error) {
	d := h.cfg.Deps
	var s started
	var refused *domain.Error
	err := d.Step(ctx, job, func(ctx context.Context) error {
		p, err := h.cfg.Publications.Update(ctx, ev.PublicationID, func(p *domain.Publication) error {
			if p.Status.Terminal() {
				return worker.ErrSkip
			}
			store, err := h.cfg.Stores.Get(ctx, p.StoreID)
			if err != nil {
				return err
			}
			if store.Status != domain.StoreVerified {
				refused = domain.ErrStoreNotVerified
				return p.Fail(refused.Code, refused.Message, d.Now())
			}
			if p.Snapshot == nil {
				if refused, err = h.capture(ctx, p); err != nil {
					return err
				}
				if refused != nil {
					return p.Fail(refused.Code, refused.Message, d.Now())
				}
			}
			return p.Start(d.Now())
		})
		if err != nil {
			return err
		}
		if refused != nil {
			return d.FailOperation(ctx, p.OperationID, refused.Code, refused.Message)
		}
		if err := d.StartOperation(ctx, p.OperationID); err != nil {
			return err
		}
		sealed, _, err := h.cfg.Stores.Credentials(ctx, p.StoreID)
		if err != nil {
			return err
		}
		s = started{publication: p, sealed: sealed}
		if p.Snapshot != nil {
			s.input = input(p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, worker.ErrSkip) {
		err = fmt.Errorf("publish: step A: %w", err)
	}
	return s, refused, err
}

// capture gives a publication without a snapshot (requested before snapshots existed) the
// content of its requested revision: the product's current content, when the product is
// still at that revision. Otherwise that content is lost: a publication never started
// fails (domain.ErrProductRevisionUnavailable) rather than publish another revision; one
// already started keeps no snapshot, and publish only looks for the product an earlier
// delivery may have created. It runs under the publication's row lock; the stored snapshot
// is never changed again (see postgres.NewPublications).
func (h *Handler) capture(ctx context.Context, p *domain.Publication) (*domain.Error, error) {
	product, err := h.cfg.Products.Get(ctx, p.ProductID)
	if err != nil {
		return nil, err
	}
	if product.Revision != p.ProductRevision {
		if p.Status == domain.TaskPending {
			return domain.ErrProductRevisionUnavailable, nil
		}
		return nil, nil
	}
	snap := product.Snapshot()
	p.Snapshot = &snap
	return nil, nil
}

// input is the create request of a publication: its snapshot, the content of the requested
// revision, and never the product's current content. It is a function of the stored
// publication only, so every delivery sends the same request.
func input(p domain.Publication) port.ProductInput {
	c := p.Snapshot
	return port.ProductInput{
		ExternalRef: p.ExternalRef(),
		Title:       c.Title,
		Description: c.Description,
		Price:       c.Price,
		Currency:    c.Currency,
		Images:      c.Images,
	}
}

// publish finds or creates the platform product. It runs outside any transaction.
func (h *Handler) publish(ctx context.Context, job worker.Job, s started) (port.PlatformProduct, string, error) {
	creds, err := worker.OpenCredentials(h.cfg.Cipher, job.WorkspaceID, s.publication.StoreID, s.sealed)
	if err != nil {
		return port.PlatformProduct{}, "", err
	}
	m, ref := h.cfg.Marketplace, s.publication.ExternalRef()
	found, err := m.FindProductByExternalRef(ctx, creds, ref)
	if err != nil {
		return port.PlatformProduct{}, "", fmt.Errorf("publish: find by external_ref: %w", err)
	}
	if found != nil {
		return *found, outcomeFound, nil
	}
	if s.publication.Snapshot == nil {
		// Started before snapshots existed, its revision's content since lost (see capture),
		// and no earlier delivery created the product: nothing can be published.
		return port.PlatformProduct{}, "", worker.Permanent(fmt.Errorf("publish: %w", domain.ErrProductRevisionUnavailable))
	}
	created, err := m.CreateProduct(ctx, creds, ref, s.input)
	if err == nil {
		return created, outcomeCreated, nil
	}
	// The outcome of a failed create is unknown: the gateway may have created the product
	// before failing. Look once more, so this delivery records it rather than the next.
	if again, ferr := m.FindProductByExternalRef(ctx, creds, ref); ferr == nil && again != nil {
		return *again, outcomeFound, nil
	}
	return port.PlatformProduct{}, "", fmt.Errorf("publish: create product: %w", err)
}

// record is Step B. It reports false, with the external product id already recorded, when
// the publication had already finished (another delivery recorded it): nothing is changed
// then.
func (h *Handler) record(ctx context.Context, job worker.Job, id uuid.UUID, product port.PlatformProduct) (bool, string, error) {
	d := h.cfg.Deps
	existing := ""
	err := d.Step(ctx, job, func(ctx context.Context) error {
		p, err := h.cfg.Publications.Update(ctx, id, func(p *domain.Publication) error {
			if p.Status.Terminal() {
				existing = p.ExternalProductID
				return worker.ErrSkip
			}
			p.ExternalProductID = product.ID
			return p.Succeed(d.Now())
		})
		if err != nil {
			return err
		}
		return d.SucceedOperation(ctx, p.OperationID, map[string]any{
			"publication_id": p.ID, "external_product_id": p.ExternalProductID,
		})
	})
	switch {
	case errors.Is(err, worker.ErrSkip):
		return false, existing, nil
	case err != nil:
		return false, "", fmt.Errorf("publish: step B: %w", err)
	}
	return true, "", nil
}

// fail records a final failure on the publication and its operation. A publication already
// finished is left alone; when the publication is gone, the operation named by the event
// fails (if it exists).
func (h *Handler) fail(ctx context.Context, job worker.Job, id, operationID uuid.UUID, f worker.Failure) error {
	d := h.cfg.Deps
	err := d.Step(ctx, job, func(ctx context.Context) error {
		_, err := worker.FailTask(ctx, d, h.cfg.Publications, id, taskOf, f)
		if isNotFound(err) {
			// The task is gone (deleted with its store or product): finish its operation,
			// named by the event, so that the client does not wait forever.
			return d.FailOperation(ctx, operationID, f.Code, f.Message)
		}
		return err
	})
	if errors.Is(err, worker.ErrSkip) || isNotFound(err) {
		return nil
	}
	return err
}

func isNotFound(err error) bool {
	var de *domain.Error
	return errors.As(err, &de) && de.Kind == domain.KindNotFound
}

// taskOf gives worker.BeginTask and worker.FailTask the task state it embeds.
func taskOf(p *domain.Publication) *domain.Task { return &p.Task }
