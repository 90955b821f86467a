package commands

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// SyncStoreProducts starts a full sync of a store's online products (docs/http-api.md: one
// active sync per store).
type SyncStoreProducts struct {
	SyncID      uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	StoreID     uuid.UUID
}

// CommandName implements bus.Command.
func (SyncStoreProducts) CommandName() string { return "SyncStoreProducts" }

// SyncStoreProductsHandler handles SyncStoreProducts.
type SyncStoreProductsHandler struct {
	flow   FlowDeps
	stores port.Stores
	syncs  port.ProductSyncs
}

// NewSyncStoreProductsHandler returns the handler. It panics on a nil dependency.
func NewSyncStoreProductsHandler(flow FlowDeps, stores port.Stores, syncs port.ProductSyncs) SyncStoreProductsHandler {
	mustHave("SyncStoreProductsHandler", flow, stores, syncs)
	return SyncStoreProductsHandler{flow: flow, stores: stores, syncs: syncs}
}

// Handle implements bus.Handler. A store whose credentials are not verified is
// STORE_NOT_VERIFIED. While a sync of the store is active another is
// PRODUCT_SYNC_ALREADY_ACTIVE, naming the active one (the database enforces it).
func (h SyncStoreProductsHandler) Handle(ctx context.Context, cmd SyncStoreProducts) (Started[domain.ProductSync], error) {
	if _, err := getVerifiedStore(ctx, h.stores, cmd.StoreID); err != nil {
		return Started[domain.ProductSync]{}, err
	}
	op := h.flow.newOperation(cmd.WorkspaceID, cmd.UserID, domain.OpProductSync, "product_sync", cmd.SyncID)
	sync := domain.NewProductSync(cmd.SyncID, cmd.WorkspaceID, op.ID, cmd.StoreID, h.flow.Now())
	err := h.flow.start(ctx, op, func() error { return h.syncs.Insert(ctx, sync) }, sync.RequestEvent())
	if errors.Is(err, domain.ErrProductSyncAlreadyActive) {
		if active, aerr := h.syncs.Active(ctx, cmd.StoreID); aerr == nil {
			return Started[domain.ProductSync]{}, domain.ErrProductSyncAlreadyActive.
				WithMessage("product sync %s of this store is still active", active.ID).
				WithField("active_sync_id", active.ID.String())
		}
	}
	if err != nil {
		return Started[domain.ProductSync]{}, err
	}
	return Started[domain.ProductSync]{Resource: sync, Operation: op}, nil
}
