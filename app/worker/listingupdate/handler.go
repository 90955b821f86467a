package listingupdate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Config configures New. Every field is required.
type Config struct {
	// Deps gives the transactions, the operations, the outbox publisher, the clock and the
	// logger.
	Deps worker.Deps
	// Updates stores the listing updates.
	Updates port.Repository[domain.ListingUpdate]
	// Publications stores the publications (their push claim and revisions).
	Publications port.Repository[domain.Publication]
	// Stores reads the store and its sealed credentials.
	Stores port.Stores
	// Cipher opens the sealed credentials.
	Cipher port.CredentialCipher
	// Marketplace is the gateway that replaces the listing's content.
	Marketplace port.Marketplace
	// Budget keeps the calls to each store within its rate limit; nil: no limit.
	Budget *worker.StoreBudget
	// Lease is how long an update holds its publication's push claim: it must be longer than
	// Marketplace's time-out of one call, with a margin for clock skew (see the package
	// comment).
	Lease time.Duration
	// CallTimeout fences the call (worker.Flow.CallTimeout): the update, and the claim's
	// release when it fails, end within it. Zero: no fence.
	CallTimeout time.Duration
}

// Validate reports the first missing field. It does not change c.
func (c Config) Validate() error {
	switch {
	case c.Deps.Tx == nil || c.Deps.Operations == nil || c.Deps.Events == nil || c.Deps.Now == nil:
		return errors.New("listingupdate: Deps.Tx, Deps.Operations, Deps.Events and Deps.Now are required")
	case c.Updates == nil || c.Publications == nil || c.Stores == nil:
		return errors.New("listingupdate: Updates, Publications and Stores are required")
	case c.Cipher == nil || c.Marketplace == nil:
		return errors.New("listingupdate: Cipher and Marketplace are required")
	case c.Lease <= 0:
		return errors.New("listingupdate: Lease must be positive")
	}
	return nil
}

// Handler handles the jobs of worker.QueueListingUpdate (see the package comment) through
// the task lifecycle (worker.Flow). It is safe for concurrent use.
type Handler struct {
	cfg  Config
	flow worker.Flow[domain.ListingUpdate, started, pushed]
}

var _ worker.Handler = (*Handler)(nil)

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("listingupdate.New: %w", err)
	}
	h := &Handler{cfg: cfg}
	h.flow = worker.Flow[domain.ListingUpdate, started, pushed]{Kind: Tasks(cfg.Deps, cfg.Updates, cfg.Publications),
		Begin: h.begin, Call: h.push, Record: h.record, CallTimeout: cfg.CallTimeout}
	return h, nil
}

// Handle implements worker.Handler.
func (h *Handler) Handle(ctx context.Context, job worker.Job) error { return h.flow.Handle(ctx, job) }

// started is what the begin step hands to the call: nothing to send (superseded), or the
// request and the credentials to send it with.
type started struct {
	superseded bool
	productID  string // the platform product
	input      port.ProductInput
	sealed     port.SealedCredentials
	store      domain.Store
}

// pushed is what the call hands to the record step.
type pushed struct {
	superseded bool
}

// busyWait is how long a delivery that met another update's live claim waits: the claim's
// remaining lease, but at most a quarter of a lease (the holder usually finishes well
// before its lease ends) and at least a second. A dead holder's lease is waited out in a
// few snoozes, well within worker.MaxSnoozes.
func busyWait(remaining, lease time.Duration) time.Duration {
	return max(min(remaining, lease/4), time.Second)
}

// begin runs with the update locked and unfinished and the declared guards checked: it
// refuses an update whose store is no longer verified, or whose publication is not
// published, and applies the ordering rule under the publication's row lock (see the
// package comment).
func (h *Handler) begin(ctx context.Context, u *domain.ListingUpdate) (started, error) {
	store, err := h.cfg.Stores.Get(ctx, u.StoreID)
	if err != nil {
		return started{}, err
	}
	if store.Status != domain.StoreVerified {
		return started{}, worker.Refuse(domain.ErrStoreNotVerified)
	}
	if err := h.cfg.Budget.Wait(ctx, store, 1); err != nil {
		return started{}, err
	}
	now := h.cfg.Deps.Now()
	s := started{store: store}
	_, err = h.cfg.Publications.Update(ctx, u.PublicationID, func(p *domain.Publication) error {
		switch {
		case !p.Published():
			return worker.Refuse(domain.ErrPublicationNotPublished)
		case u.ProductRevision <= p.PushedRevision || u.ProductRevision < p.SentRevision:
			p.Release(u.ID)
			s.superseded = true
			return nil
		case p.Push.HeldBy(u.ID, now):
			return domain.ErrListingUpdateBusy.WithRetryAfter(busyWait(p.Push.Until.Sub(now), h.cfg.Lease))
		}
		p.Claim(u.ID, u.ProductRevision, now, h.cfg.Lease)
		s.productID = p.ExternalProductID
		s.input = input(*p, *u)
		return nil
	})
	if err != nil || s.superseded {
		return s, err
	}
	s.sealed, _, err = h.cfg.Stores.Credentials(ctx, u.StoreID)
	return s, err
}

// input is the update's request: its snapshot, under the publication's external_ref. It is
// a function of stored rows only, so every delivery sends the same request.
func input(p domain.Publication, u domain.ListingUpdate) port.ProductInput {
	c := u.Snapshot
	return port.ProductInput{ExternalRef: p.ExternalRef(), Title: c.Title, Description: c.Description, Price: c.Price,
		Currency: c.Currency, Images: c.Images}
}

// push sends the PUT, with the update id as Idempotency-Key, outside any transaction.
func (h *Handler) push(ctx context.Context, u domain.ListingUpdate, s started, tx worker.Tx) (pushed, error) {
	if s.superseded {
		return pushed{superseded: true}, nil
	}
	creds, err := worker.OpenCredentials(h.cfg.Cipher, u.WorkspaceID, u.StoreID, s.sealed)
	if err != nil {
		return pushed{}, err
	}
	if _, err := h.cfg.Marketplace.UpdateProduct(ctx, creds, u.ID.String(), s.productID, s.input); err != nil {
		h.cfg.Budget.Limited(ctx, s.store, err)
		var de *domain.Error
		if errors.As(err, &de) && de.RetryAfter > 0 {
			// The gateway refused the request (429, or 503 with Retry-After) without applying
			// it: while this job waits, other updates need not. Best effort: a claim not
			// released ends with its lease.
			_ = tx(ctx, func(ctx context.Context) error { return release(ctx, h.cfg.Publications, u) })
		}
		return pushed{}, fmt.Errorf("listingupdate: update product: %w", err)
	}
	return pushed{}, nil
}

// record runs with the update locked and unfinished: a pushed revision raises the
// publication's PushedRevision (never lowers it) and the update's claim is released.
func (h *Handler) record(ctx context.Context, u *domain.ListingUpdate, r pushed) (any, error) {
	p, err := h.cfg.Publications.Update(ctx, u.PublicationID, func(p *domain.Publication) error {
		if !r.superseded {
			p.RecordPushed(u.ProductRevision)
		}
		p.Release(u.ID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	u.Outcome = domain.UpdatePushed
	if r.superseded {
		u.Outcome = domain.UpdateSuperseded
	}
	return map[string]any{"update_id": u.ID, "publication_id": u.PublicationID, "product_revision": u.ProductRevision,
		"outcome": u.Outcome, "platform_revision": p.PushedRevision, "external_product_id": p.ExternalProductID}, nil
}
