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
	products port.Products
	now      port.Clock
}

// NewCreateProductHandler returns the handler. It panics on a nil dependency.
func NewCreateProductHandler(products port.Products, now port.Clock) CreateProductHandler {
	mustHave("CreateProductHandler", products, now)
	return CreateProductHandler{products: products, now: now}
}

// Handle implements bus.Handler: it validates the content and inserts the product.
func (h CreateProductHandler) Handle(ctx context.Context, cmd CreateProduct) (domain.Product, error) {
	p, err := domain.NewProduct(cmd.ProductID, cmd.WorkspaceID, cmd.Content, h.now())
	if err != nil {
		return domain.Product{}, err
	}
	if err := h.products.Insert(ctx, p); err != nil {
		return domain.Product{}, err
	}
	return p, nil
}
