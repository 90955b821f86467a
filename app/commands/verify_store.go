package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// VerifyStore verifies a store's current credentials again.
type VerifyStore struct {
	StoreID     uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
}

// CommandName implements bus.Command.
func (VerifyStore) CommandName() string { return "VerifyStore" }

// VerifyStoreHandler handles VerifyStore.
type VerifyStoreHandler struct {
	flow          FlowDeps
	stores        port.Stores
	verifications port.Repository[domain.StoreVerification]
}

// NewVerifyStoreHandler returns the handler. It panics on a nil dependency.
func NewVerifyStoreHandler(flow FlowDeps, stores port.Stores, verifications port.Repository[domain.StoreVerification]) VerifyStoreHandler {
	mustHave("VerifyStoreHandler", flow, stores, verifications)
	return VerifyStoreHandler{flow: flow, stores: stores, verifications: verifications}
}

// Handle implements bus.Handler: it starts a verification of the store's current
// credentials; an unknown store is STORE_NOT_FOUND.
func (h VerifyStoreHandler) Handle(ctx context.Context, cmd VerifyStore) (Started[domain.Store], error) {
	s, err := h.stores.Get(ctx, cmd.StoreID)
	if err != nil {
		return Started[domain.Store]{}, err
	}
	return startStoreVerification(ctx, h.flow, h.verifications, s, cmd.UserID)
}
