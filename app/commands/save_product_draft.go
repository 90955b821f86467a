package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// SaveProductDraft replaces a product's content when ExpectedRevision (from If-Match) is its
// current revision (no idempotency, no outbox: the revision handles concurrency).
type SaveProductDraft struct {
	ProductID        uuid.UUID
	ExpectedRevision int
	Content          domain.ProductContent
}

// CommandName implements bus.Command.
func (SaveProductDraft) CommandName() string { return "SaveProductDraft" }

// SaveProductDraftHandler handles SaveProductDraft.
type SaveProductDraftHandler struct {
	products port.Products
	now      port.Clock
}

// NewSaveProductDraftHandler returns the handler. It panics on a nil dependency.
func NewSaveProductDraftHandler(products port.Products, now port.Clock) SaveProductDraftHandler {
	mustHave("SaveProductDraftHandler", products, now)
	return SaveProductDraftHandler{products: products, now: now}
}

// Handle implements bus.Handler: under the product's row lock it saves the draft as the
// next revision, or refuses with REVISION_MISMATCH when the product has moved on.
func (h SaveProductDraftHandler) Handle(ctx context.Context, cmd SaveProductDraft) (domain.Product, error) {
	return h.products.Update(ctx, cmd.ProductID, func(p *domain.Product) error {
		return p.SaveDraft(cmd.ExpectedRevision, cmd.Content, h.now())
	})
}
