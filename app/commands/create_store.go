package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// CreateStore creates a store with its credentials (sealed before they are stored) and
// starts their verification (docs/http-api.md).
type CreateStore struct {
	StoreID     uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	Platform    string
	ShopID      string
	Name        string
	Credentials port.Credentials
}

// CommandName implements bus.Command.
func (CreateStore) CommandName() string { return "CreateStore" }

// CreateStoreHandler handles CreateStore.
type CreateStoreHandler struct {
	flow          FlowDeps
	stores        port.Stores
	verifications port.Repository[domain.StoreVerification]
	cipher        port.CredentialCipher
	platforms     []string
}

// NewCreateStoreHandler returns the handler. platforms lists the platform names the
// marketplace gateway adapts; a store of any other platform is refused. It panics on a nil
// dependency.
func NewCreateStoreHandler(flow FlowDeps, stores port.Stores, verifications port.Repository[domain.StoreVerification],
	cipher port.CredentialCipher, platforms []string) CreateStoreHandler {
	mustHave("CreateStoreHandler", flow, stores, verifications, cipher)
	return CreateStoreHandler{flow: flow, stores: stores, verifications: verifications, cipher: cipher, platforms: platforms}
}

// Handle implements bus.Handler: it inserts the store, seals and stores its credentials and
// starts their verification, all in the bus's transaction. A shop already connected is
// STORE_ALREADY_EXISTS; missing credentials are CREDENTIALS_INVALID.
func (h CreateStoreHandler) Handle(ctx context.Context, cmd CreateStore) (Started[domain.Store], error) {
	s, err := domain.NewStore(cmd.StoreID, cmd.WorkspaceID, cmd.Platform, cmd.ShopID, cmd.Name, h.platforms, h.flow.Now())
	if err != nil {
		return Started[domain.Store]{}, err
	}
	if cmd.Credentials.IsZero() {
		return Started[domain.Store]{}, port.ErrCredentialsInvalid
	}
	if err := h.stores.Insert(ctx, s); err != nil {
		return Started[domain.Store]{}, err
	}
	if err := sealCredentials(ctx, h.stores, h.cipher, s, cmd.Credentials); err != nil {
		return Started[domain.Store]{}, err
	}
	return startStoreVerification(ctx, h.flow, h.verifications, s, cmd.UserID)
}
