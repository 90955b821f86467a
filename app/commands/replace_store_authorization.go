package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// ReplaceStoreAuthorization replaces a store's credentials and verifies the new ones.
type ReplaceStoreAuthorization struct {
	StoreID     uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	Credentials port.Credentials
}

// CommandName implements bus.Command.
func (ReplaceStoreAuthorization) CommandName() string { return "ReplaceStoreAuthorization" }

// ReplaceStoreAuthorizationHandler handles ReplaceStoreAuthorization.
type ReplaceStoreAuthorizationHandler struct {
	flow          FlowDeps
	stores        port.Stores
	verifications port.Repository[domain.StoreVerification]
	cipher        port.CredentialCipher
}

// NewReplaceStoreAuthorizationHandler returns the handler. It panics on a nil dependency.
func NewReplaceStoreAuthorizationHandler(flow FlowDeps, stores port.Stores,
	verifications port.Repository[domain.StoreVerification], cipher port.CredentialCipher) ReplaceStoreAuthorizationHandler {
	mustHave("ReplaceStoreAuthorizationHandler", flow, stores, verifications, cipher)
	return ReplaceStoreAuthorizationHandler{flow: flow, stores: stores, verifications: verifications, cipher: cipher}
}

// Handle implements bus.Handler: under the store's row lock it moves the store to a new
// credentials version (any verification of the old one can no longer record its result),
// stores the sealed credentials and starts their verification.
func (h ReplaceStoreAuthorizationHandler) Handle(ctx context.Context, cmd ReplaceStoreAuthorization) (Started[domain.Store], error) {
	if cmd.Credentials.IsZero() {
		return Started[domain.Store]{}, port.ErrCredentialsInvalid
	}
	s, err := h.stores.Update(ctx, cmd.StoreID, func(s *domain.Store) error {
		s.ReplaceCredentials(h.flow.Now())
		return nil
	})
	if err != nil {
		return Started[domain.Store]{}, err
	}
	if err := sealCredentials(ctx, h.stores, h.cipher, s, cmd.Credentials); err != nil {
		return Started[domain.Store]{}, err
	}
	return startStoreVerification(ctx, h.flow, h.verifications, s, cmd.UserID)
}
