package commands

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// UpdateListing starts a listing update: it pushes the product's current revision to the
// platform product of a published publication (see UpdateListingHandler.Handle).
type UpdateListing struct {
	UpdateID      uuid.UUID
	WorkspaceID   uuid.UUID
	UserID        uuid.UUID
	PublicationID uuid.UUID
}

// CommandName implements bus.Command.
func (UpdateListing) CommandName() string { return "UpdateListing" }

// UpdateListingHandler handles UpdateListing.
type UpdateListingHandler struct {
	flow         FlowDeps
	products     port.Products
	publications port.Repository[domain.Publication]
	updates      port.Repository[domain.ListingUpdate]
}

// NewUpdateListingHandler returns the handler. It panics on a nil dependency.
func NewUpdateListingHandler(flow FlowDeps, products port.Products, publications port.Repository[domain.Publication],
	updates port.Repository[domain.ListingUpdate]) UpdateListingHandler {
	mustHave("UpdateListingHandler", flow, products, publications, updates)
	return UpdateListingHandler{flow: flow, products: products, publications: publications, updates: updates}
}

// Handle implements bus.Handler. An unknown publication is PUBLICATION_NOT_FOUND; one that
// has not succeeded (no platform product yet) is PUBLICATION_NOT_PUBLISHED. A declared guard
// that does not hold of the publication or its store refuses the update's insert with the
// guard's error (sql/060_task_guards.sql).
//
// The request names no revision: the update pushes the product as this transaction reads it.
// It records that revision (ProductRevision, also in the event and the response) and its
// content (Snapshot), both from the same row read, with the update and its event. Whether
// the push happens is the worker's decision (an older revision than the platform holds is
// never sent), not this command's: every request that passes the checks is accepted.
func (h UpdateListingHandler) Handle(ctx context.Context, cmd UpdateListing) (Started[domain.ListingUpdate], error) {
	pub, err := h.publications.Get(ctx, cmd.PublicationID)
	if errors.Is(err, domain.ErrNotFound) {
		err = domain.ErrPublicationNotFound
	}
	if err != nil {
		return Started[domain.ListingUpdate]{}, err
	}
	if !pub.Published() {
		return Started[domain.ListingUpdate]{}, domain.ErrPublicationNotPublished
	}
	p, err := getProduct(ctx, h.products, pub.ProductID)
	if err != nil {
		return Started[domain.ListingUpdate]{}, err
	}
	op := h.flow.newOperation(cmd.WorkspaceID, cmd.UserID, domain.OpListingUpdate, "listing_update", cmd.UpdateID)
	u := domain.NewListingUpdate(cmd.UpdateID, op.ID, pub, p, h.flow.Now())
	if err := h.flow.start(ctx, op, func() error { return h.updates.Insert(ctx, u) }, u.RequestEvent()); err != nil {
		return Started[domain.ListingUpdate]{}, err
	}
	return Started[domain.ListingUpdate]{Resource: u, Operation: op}, nil
}
