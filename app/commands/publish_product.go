package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// PublishProduct starts the first publish of a product to a store (docs/http-api.md): of the
// product's revision when the command runs (see PublishProductHandler.Handle).
type PublishProduct struct {
	PublicationID uuid.UUID
	WorkspaceID   uuid.UUID
	UserID        uuid.UUID
	ProductID     uuid.UUID
	StoreID       uuid.UUID
}

// CommandName implements bus.Command.
func (PublishProduct) CommandName() string { return "PublishProduct" }

// PublishProductHandler handles PublishProduct.
type PublishProductHandler struct {
	flow         FlowDeps
	products     port.Products
	stores       port.Stores
	publications port.Repository[domain.Publication]
}

// NewPublishProductHandler returns the handler. It panics on a nil dependency.
func NewPublishProductHandler(flow FlowDeps, products port.Products, stores port.Stores,
	publications port.Repository[domain.Publication]) PublishProductHandler {
	mustHave("PublishProductHandler", flow, products, stores, publications)
	return PublishProductHandler{flow: flow, products: products, stores: stores, publications: publications}
}

// Handle implements bus.Handler. An unknown product is PRODUCT_NOT_FOUND, a store whose
// credentials are not verified STORE_NOT_VERIFIED. A second request for the same product
// and store is PRODUCT_ALREADY_PUBLISHED while the first is pending, running or done.
//
// The request names no revision: it publishes the product as it is when this transaction
// reads it. The publication records that revision (ProductRevision, also in the event and in
// the response) and a snapshot of its content, both from the same row read, in the same
// transaction as the publication and its event. The worker publishes that snapshot: drafts
// saved after the request are not published by this publication, and every delivery sends
// the same content.
func (h PublishProductHandler) Handle(ctx context.Context, cmd PublishProduct) (Started[domain.Publication], error) {
	p, err := getProduct(ctx, h.products, cmd.ProductID)
	if err != nil {
		return Started[domain.Publication]{}, err
	}
	if _, err := getVerifiedStore(ctx, h.stores, cmd.StoreID); err != nil {
		return Started[domain.Publication]{}, err
	}
	op := h.flow.newOperation(cmd.WorkspaceID, cmd.UserID, domain.OpPublication, "publication", cmd.PublicationID)
	pub := domain.NewPublication(cmd.PublicationID, cmd.WorkspaceID, op.ID, p, cmd.StoreID, h.flow.Now())
	err = h.flow.start(ctx, op, func() error { return h.publications.Insert(ctx, pub) }, pub.RequestEvent())
	if err != nil {
		return Started[domain.Publication]{}, err
	}
	return Started[domain.Publication]{Resource: pub, Operation: op}, nil
}
