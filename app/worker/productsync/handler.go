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
	// Budget keeps the calls to each store within its rate limit: a delivery takes one
	// request of it before it starts (its first page); nil: no limit.
	Budget *worker.StoreBudget
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

// Handler handles the jobs of the product-sync queue (worker.QueueProductSync) through the
// task lifecycle (worker.Flow). Safe for concurrent use; see the package comment for its
// contract.
type Handler struct {
	cfg  Config
	flow worker.Flow[domain.ProductSync, port.SealedCredentials, lastPage]
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("productsync.New: %w", err)
	}
	h := &Handler{cfg: cfg}
	h.flow = worker.Flow[domain.ProductSync, port.SealedCredentials, lastPage]{Kind: Tasks(cfg.Deps, cfg.Syncs),
		Begin: h.begin, Call: h.sync, Record: h.record}
	return h, nil
}

// Handle runs the sync of a domain.ProductSyncRequested job (see the package comment).
func (h *Handler) Handle(ctx context.Context, job worker.Job) error { return h.flow.Handle(ctx, job) }

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

// lastPage is the sync's last page and where it was fetched from: the record step saves it
// and finishes the sync.
type lastPage struct {
	at   position
	page port.ProductPage
}

// begin runs under the sync's row lock: a sync of a store that is no longer verified is
// refused (STORE_NOT_VERIFIED); otherwise it takes a request of the store's budget and reads
// the store's sealed credentials.
func (h *Handler) begin(ctx context.Context, s *domain.ProductSync) (port.SealedCredentials, error) {
	store, err := h.cfg.Stores.Get(ctx, s.StoreID)
	if err != nil {
		return port.SealedCredentials{}, err
	}
	if store.Status != domain.StoreVerified {
		return port.SealedCredentials{}, worker.Refuse(domain.ErrStoreNotVerified)
	}
	if err := h.cfg.Budget.Wait(ctx, store, 1); err != nil {
		return port.SealedCredentials{}, err
	}
	sealed, _, err := h.cfg.Stores.Credentials(ctx, s.StoreID)
	return sealed, err
}

// sync fetches pages from where the sync stands, saving each but the last in a transaction
// of its own (compare-and-set on the position, so that two deliveries never save a page
// twice); it returns the last page for the record step.
func (h *Handler) sync(ctx context.Context, s domain.ProductSync, sealed port.SealedCredentials, tx worker.Tx) (lastPage, error) {
	creds, err := worker.OpenCredentials(h.cfg.Cipher, s.WorkspaceID, s.StoreID, sealed)
	if err != nil {
		return lastPage{}, err
	}
	pos := position{token: s.NextPageToken, pages: s.PagesDone}
	var gate worker.ProgressGate
	for {
		page, err := h.cfg.Marketplace.ListProducts(ctx, creds, h.cfg.PageSize, pos.token)
		if err != nil {
			return lastPage{}, fmt.Errorf("list page %d: %w", pos.pages+1, err)
		}
		if page.NextPageToken != "" && page.NextPageToken == pos.token {
			return lastPage{}, worker.Permanent(fmt.Errorf("list page %d: %w", pos.pages+1, ErrPaginationInvalid))
		}
		if page.NextPageToken == "" {
			return lastPage{at: pos, page: page}, nil
		}
		var cur, moved domain.ProductSync
		err = tx(ctx, func(ctx context.Context) error {
			var err error
			cur, err = h.cfg.Syncs.Update(ctx, s.ID, func(cs *domain.ProductSync) error {
				if cs.Status.Terminal() {
					return worker.ErrSkip
				}
				if err := h.advance(cs, pos, page); err != nil {
					moved = *cs
					return err
				}
				return nil
			})
			if err != nil {
				return err
			}
			if err := h.upsert(ctx, cur, page); err != nil {
				return err
			}
			if !gate.Due(h.cfg.Deps.Now()) {
				return nil
			}
			// Products synced so far; the marketplace does not say how many there are.
			return h.cfg.Deps.ReportProgress(ctx, cur.OperationID, domain.Progress{Done: int64(cur.ItemsSynced)})
		})
		switch {
		case errors.Is(err, errMoved):
			// Another delivery recorded this page: go on from where the database is.
			pos = position{token: moved.NextPageToken, pages: moved.PagesDone}
			continue
		case err != nil:
			return lastPage{}, fmt.Errorf("record page %d: %w", pos.pages+1, err)
		}
		pos = position{token: cur.NextPageToken, pages: cur.PagesDone}
	}
}

// record saves the last page (record step): the sync then succeeds, and publishes
// product_sync.completed. A sync moved on since
// the page was fetched is errMoved (retried).
func (h *Handler) record(ctx context.Context, s *domain.ProductSync, last lastPage) (any, error) {
	if err := h.advance(s, last.at, last.page); err != nil {
		return nil, err
	}
	if err := h.upsert(ctx, *s, last.page); err != nil {
		return nil, err
	}
	if err := h.cfg.Deps.Events.Publish(ctx, s.Completed()); err != nil {
		return nil, err
	}
	return Result{SyncID: s.ID, Pages: s.PagesDone, Items: s.ItemsSynced}, nil
}

// advance moves s past page, fetched from pos; errMoved when s is no longer at pos.
func (h *Handler) advance(s *domain.ProductSync, pos position, page port.ProductPage) error {
	if s.NextPageToken != pos.token || s.PagesDone != pos.pages {
		return errMoved
	}
	s.NextPageToken = page.NextPageToken
	s.PagesDone++
	s.ItemsSynced += len(page.Items)
	s.UpdatedAt = h.cfg.Deps.Now()
	s.Version++
	return nil
}

// upsert saves the page's products as the sync's platform products.
func (h *Handler) upsert(ctx context.Context, s domain.ProductSync, page port.ProductPage) error {
	if len(page.Items) == 0 {
		return nil
	}
	return h.cfg.Syncs.UpsertPlatformProducts(ctx, s.StoreID, s.ID, page.Items)
}

// taskOf gives worker.Kind the task state it embeds.
func taskOf(s *domain.ProductSync) *domain.Task { return &s.Task }
