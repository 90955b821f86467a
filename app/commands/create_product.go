package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// CreateProduct creates a product at revision 1 in the actor's workspace.
type CreateProduct struct {
	ProductID   uuid.UUID
	WorkspaceID uuid.UUID
	Content     domain.ProductContent
}

// CommandName implements bus.Command.
func (CreateProduct) CommandName() string { return "CreateProduct" }

// CreateProductHandler handles CreateProduct.
type CreateProductHandler struct {
	Products port.Products
	Now      port.Clock
}

// Handle implements bus.Handler.
func (h CreateProductHandler) Handle(ctx context.Context, cmd CreateProduct) (domain.Product, error) {
	p, err := domain.NewProduct(cmd.ProductID, cmd.WorkspaceID, cmd.Content, h.Now())
	if err != nil {
		return domain.Product{}, err
	}
	if err := h.Products.Insert(ctx, p); err != nil {
		return domain.Product{}, err
	}
	return p, nil
}
