package commands

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// CreateStore creates a store with its credentials (sealed before they are stored) and
// starts their verification (seed §5, row 1).
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

// ReplaceStoreAuthorization replaces a store's credentials and verifies the new ones.
type ReplaceStoreAuthorization struct {
	StoreID     uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	Credentials port.Credentials
}

// CommandName implements bus.Command.
func (ReplaceStoreAuthorization) CommandName() string { return "ReplaceStoreAuthorization" }

// VerifyStore verifies a store's current credentials again.
type VerifyStore struct {
	StoreID     uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
}

// CommandName implements bus.Command.
func (VerifyStore) CommandName() string { return "VerifyStore" }

// StoreHandlers handles the store commands.
type StoreHandlers struct {
	FlowDeps
	Stores        port.Stores
	Verifications port.Repository[domain.StoreVerification]
	Cipher        port.CredentialCipher
	// Platforms lists the platform names the marketplace gateway adapts.
	Platforms []string
}

// Create handles CreateStore.
func (h StoreHandlers) Create(ctx context.Context, cmd CreateStore) (Started[domain.Store], error) {
	s, err := domain.NewStore(cmd.StoreID, cmd.WorkspaceID, cmd.Platform, cmd.ShopID, cmd.Name, h.Platforms, h.now())
	if err != nil {
		return Started[domain.Store]{}, err
	}
	if cmd.Credentials.IsZero() {
		return Started[domain.Store]{}, port.ErrCredentialsInvalid
	}
	if err := h.Stores.Insert(ctx, s); err != nil {
		return Started[domain.Store]{}, err
	}
	if err := h.seal(ctx, s, cmd.Credentials); err != nil {
		return Started[domain.Store]{}, err
	}
	return h.verify(ctx, s, cmd.UserID)
}

// ReplaceAuthorization handles ReplaceStoreAuthorization.
func (h StoreHandlers) ReplaceAuthorization(ctx context.Context, cmd ReplaceStoreAuthorization) (Started[domain.Store], error) {
	if cmd.Credentials.IsZero() {
		return Started[domain.Store]{}, port.ErrCredentialsInvalid
	}
	s, err := h.Stores.Update(ctx, cmd.StoreID, func(s *domain.Store) error {
		s.ReplaceCredentials(h.now())
		return nil
	})
	if err != nil {
		return Started[domain.Store]{}, err
	}
	if err := h.seal(ctx, s, cmd.Credentials); err != nil {
		return Started[domain.Store]{}, err
	}
	return h.verify(ctx, s, cmd.UserID)
}

// Verify handles VerifyStore.
func (h StoreHandlers) Verify(ctx context.Context, cmd VerifyStore) (Started[domain.Store], error) {
	s, err := h.Stores.Get(ctx, cmd.StoreID)
	if err != nil {
		return Started[domain.Store]{}, err
	}
	return h.verify(ctx, s, cmd.UserID)
}

func (h StoreHandlers) seal(ctx context.Context, s domain.Store, creds port.Credentials) error {
	plain, err := creds.SecretJSON()
	if err != nil {
		return err
	}
	sealed, keyID, err := h.Cipher.Seal(plain, port.CredentialsAD(s.WorkspaceID, s.ID))
	clear(plain)
	if err != nil {
		return fmt.Errorf("seal credentials: %w", err)
	}
	return h.Stores.SetCredentials(ctx, s.ID, port.SealedCredentials{Ciphertext: sealed, KeyID: keyID})
}

func (h StoreHandlers) verify(ctx context.Context, s domain.Store, user uuid.UUID) (Started[domain.Store], error) {
	op := h.newOperation(s.WorkspaceID, user, OpStoreVerification, "store", s.ID)
	v := domain.NewStoreVerification(uuid.New(), s.WorkspaceID, op.ID, s, h.now())
	err := h.start(ctx, op, func() error { return h.Verifications.Insert(ctx, v) }, v.RequestEvent())
	if err != nil {
		return Started[domain.Store]{}, err
	}
	return Started[domain.Store]{Resource: s, Operation: op}, nil
}
