package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// ErrCredentialsUnreadable is worker.ErrCredentialsUnreadable, recorded when the store's
// credentials cannot be opened.
var ErrCredentialsUnreadable = worker.ErrCredentialsUnreadable

// Config configures New. Every field but Budget is required.
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
	// Budget keeps the calls to each store within its rate limit; nil: no limit.
	Budget *worker.StoreBudget
	// CallTimeout fences the call (worker.Flow.CallTimeout): the find and the create end
	// within it. Zero: no fence.
	CallTimeout time.Duration
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

// Handler handles the jobs of worker.QueueListingPublish (see the package comment) through
// the task lifecycle (worker.Flow). It is safe for concurrent use and serializes the jobs of
// one publication: use one Handler per process.
type Handler struct {
	cfg   Config
	log   *slog.Logger
	flow  worker.Flow[domain.Publication, started, port.PlatformProduct]
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
	h := &Handler{cfg: cfg, log: log}
	h.flow = worker.Flow[domain.Publication, started, port.PlatformProduct]{Kind: Tasks(cfg.Deps, cfg.Publications),
		Begin: h.begin, Call: h.publish, Record: h.record, Finished: h.finished, LastLook: h.lastLook,
		CallTimeout: cfg.CallTimeout}
	return h, nil
}

// Handle implements worker.Handler.
func (h *Handler) Handle(ctx context.Context, job worker.Job) error {
	if id, err := h.flow.TaskID(job); err == nil {
		unlock, err := h.locks.lock(ctx, id)
		if err != nil {
			return fmt.Errorf("publish.Handle: %w", err)
		}
		defer unlock()
	}
	return h.flow.Handle(ctx, job)
}

// started is what the begin step hands to the external call.
type started struct {
	input  port.ProductInput
	sealed port.SealedCredentials
	store  domain.Store
}

// begin runs under the publication's row lock: it refuses a publication whose store is not
// verified, or whose requested revision's content is lost, takes the two requests of the
// call (find, create) from the store's budget, and reads the store's sealed credentials.
func (h *Handler) begin(ctx context.Context, p *domain.Publication) (started, error) {
	store, err := h.cfg.Stores.Get(ctx, p.StoreID)
	if err != nil {
		return started{}, err
	}
	if store.Status != domain.StoreVerified {
		return started{}, worker.Refuse(domain.ErrStoreNotVerified)
	}
	if err := h.cfg.Budget.Wait(ctx, store, 2); err != nil {
		return started{}, err
	}
	if p.Snapshot == nil {
		refused, err := h.capture(ctx, p)
		if err != nil {
			return started{}, err
		}
		if refused != nil {
			return started{}, worker.Refuse(refused)
		}
	}
	sealed, _, err := h.cfg.Stores.Credentials(ctx, p.StoreID)
	if err != nil {
		return started{}, err
	}
	s := started{sealed: sealed, store: store}
	if p.Snapshot != nil {
		s.input = input(*p)
	}
	return s, nil
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

// lastLook is the publication's last look before a final failure (worker.Flow.LastLook): it
// reads the store's sealed credentials (in a transaction of its own) and asks the platform,
// outside any transaction, for the product by the publication's external_ref; found, the
// engine records the publication succeeded with it.
func (h *Handler) lastLook(ctx context.Context, p domain.Publication, tx worker.Tx) (port.PlatformProduct, bool, error) {
	var sealed port.SealedCredentials
	if err := tx(ctx, func(ctx context.Context) error {
		var err error
		sealed, _, err = h.cfg.Stores.Credentials(ctx, p.StoreID)
		return err
	}); err != nil {
		return port.PlatformProduct{}, false, err
	}
	creds, err := worker.OpenCredentials(h.cfg.Cipher, p.WorkspaceID, p.StoreID, sealed)
	if err != nil {
		return port.PlatformProduct{}, false, err
	}
	found, err := h.cfg.Marketplace.FindProductByExternalRef(ctx, creds, p.ExternalRef())
	if err != nil || found == nil {
		return port.PlatformProduct{}, false, err
	}
	return *found, true, nil
}

// publish finds or creates the platform product: it looks the product up by the
// publication's external_ref first (a gateway may ignore Idempotency-Key), then creates it
// with the publication id as Idempotency-Key. It runs outside any transaction.
func (h *Handler) publish(ctx context.Context, p domain.Publication, s started, _ worker.Tx) (port.PlatformProduct, error) {
	creds, err := worker.OpenCredentials(h.cfg.Cipher, p.WorkspaceID, p.StoreID, s.sealed)
	if err != nil {
		return port.PlatformProduct{}, err
	}
	m, ref := h.cfg.Marketplace, p.ExternalRef()
	found, err := m.FindProductByExternalRef(ctx, creds, ref)
	if err != nil {
		h.cfg.Budget.Limited(ctx, s.store, err)
		return port.PlatformProduct{}, fmt.Errorf("publish: find by external_ref: %w", err)
	}
	if found != nil {
		return *found, nil
	}
	if p.Snapshot == nil {
		// Started before snapshots existed, its revision's content since lost (see capture),
		// and no earlier delivery created the product: nothing can be published.
		return port.PlatformProduct{}, worker.Permanent(fmt.Errorf("publish: %w", domain.ErrProductRevisionUnavailable))
	}
	created, err := m.CreateProduct(ctx, creds, ref, s.input)
	if err == nil {
		return created, nil
	}
	// The outcome of a failed create is unknown: the gateway may have created the product
	// before failing. Look once more, so this delivery records it rather than the next.
	if again, ferr := m.FindProductByExternalRef(ctx, creds, ref); ferr == nil && again != nil {
		return *again, nil
	}
	h.cfg.Budget.Limited(ctx, s.store, err)
	return port.PlatformProduct{}, fmt.Errorf("publish: create product: %w", err)
}

// record stores the platform product's id on the publication (record step), and that the
// platform holds the published revision (the floor of later listing updates), and publishes
// publication.published in the same transaction.
func (h *Handler) record(ctx context.Context, p *domain.Publication, product port.PlatformProduct) (any, error) {
	p.ExternalProductID = product.ID
	p.RecordPushed(p.ProductRevision)
	if err := h.cfg.Deps.Events.Publish(ctx, p.PublishedEvent()); err != nil {
		return nil, err
	}
	return map[string]any{"publication_id": p.ID, "external_product_id": product.ID}, nil
}

// finished reports a second platform product: only two overlapping deliveries against a
// gateway that ignores Idempotency-Key get here (see the package comment).
func (h *Handler) finished(ctx context.Context, p domain.Publication, product port.PlatformProduct) {
	if p.ExternalProductID != "" && p.ExternalProductID != product.ID {
		h.log.ErrorContext(ctx, "publication: the platform holds a second product for this publication",
			slog.String("publication_id", p.ID.String()), slog.String("recorded_external_product_id", p.ExternalProductID),
			slog.String("extra_external_product_id", product.ID))
	}
}

// taskOf gives worker.Kind the task state a publication embeds.
func taskOf(p *domain.Publication) *domain.Task { return &p.Task }
