package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// SaveProductDraft replaces a product's content when ExpectedRevision (from If-Match) is its
// current revision (seed §5: no idempotency, no outbox; the revision handles concurrency).
type SaveProductDraft struct {
	ProductID        uuid.UUID
	ExpectedRevision int
	Content          domain.ProductContent
}

// CommandName implements bus.Command.
func (SaveProductDraft) CommandName() string { return "SaveProductDraft" }

// SaveProductDraftHandler handles SaveProductDraft.
type SaveProductDraftHandler struct {
	Products port.Products
	Now      port.Clock
}

// Handle implements bus.Handler.
func (h SaveProductDraftHandler) Handle(ctx context.Context, cmd SaveProductDraft) (domain.Product, error) {
	return h.Products.Update(ctx, cmd.ProductID, func(p *domain.Product) error {
		return p.SaveDraft(cmd.ExpectedRevision, cmd.Content, h.Now())
	})
}
