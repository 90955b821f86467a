package commands

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// IntegrationSecretPrefix starts every integration secret, so that a leaked one is easy to
// recognise (and to scan for).
const IntegrationSecretPrefix = "lki_"

// CreateIntegration creates an integration principal of the workspace, with a new secret.
// Only an owner of the workspace may; it runs without Idempotency (a replay would have to
// store the secret).
type CreateIntegration struct {
	IntegrationID uuid.UUID
	WorkspaceID   uuid.UUID
	UserID        uuid.UUID // the owner who creates it
	Name          string
}

// CommandName implements bus.Command.
func (CreateIntegration) CommandName() string { return "CreateIntegration" }

// CreatedIntegration is the new integration and its secret in plain text: the one time it
// is shown. It must never be stored, logged or replayed.
type CreatedIntegration struct {
	Integration domain.Integration
	Secret      string
}

// CreateIntegrationHandler handles CreateIntegration.
type CreateIntegrationHandler struct {
	accounts     port.Accounts
	integrations port.Integrations
	cipher       port.CredentialCipher
	now          port.Clock
}

// NewCreateIntegrationHandler returns the handler. It panics on a nil dependency.
func NewCreateIntegrationHandler(accounts port.Accounts, integrations port.Integrations, cipher port.CredentialCipher,
	now port.Clock) CreateIntegrationHandler {
	mustHave("CreateIntegrationHandler", accounts, integrations, cipher, now)
	return CreateIntegrationHandler{accounts: accounts, integrations: integrations, cipher: cipher, now: now}
}

// Handle implements bus.Handler: it checks that the actor owns the workspace, generates a
// secret of 256 random bits, seals it (bound to the workspace and the integration) and
// inserts the integration with its user and membership, in the bus's transaction. A
// non-owner gets OWNER_REQUIRED and nothing is written.
func (h CreateIntegrationHandler) Handle(ctx context.Context, cmd CreateIntegration) (CreatedIntegration, error) {
	if err := requireOwner(ctx, h.accounts, cmd.WorkspaceID, cmd.UserID); err != nil {
		return CreatedIntegration{}, err
	}
	in, err := domain.NewIntegration(cmd.IntegrationID, cmd.WorkspaceID, domain.NewID(), cmd.UserID, cmd.Name,
		h.now().UTC().Truncate(time.Microsecond)) // as stored: the response and later reads agree
	if err != nil {
		return CreatedIntegration{}, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return CreatedIntegration{}, fmt.Errorf("CreateIntegration: random secret: %w", err)
	}
	secret := IntegrationSecretPrefix + base64.RawURLEncoding.EncodeToString(raw)
	clear(raw)
	sealed, keyID, err := h.cipher.Seal([]byte(secret), port.IntegrationSecretAD(in.WorkspaceID, in.ID))
	if err != nil {
		return CreatedIntegration{}, fmt.Errorf("CreateIntegration: seal secret: %w", err)
	}
	if err := h.integrations.Create(ctx, in, port.SealedSecret{Ciphertext: sealed, KeyID: keyID}); err != nil {
		return CreatedIntegration{}, err
	}
	return CreatedIntegration{Integration: in, Secret: secret}, nil
}

// requireOwner returns domain.ErrOwnerRequired unless user owns the workspace.
func requireOwner(ctx context.Context, accounts port.Accounts, workspaceID, user uuid.UUID) error {
	role, err := accounts.Role(ctx, workspaceID, user)
	if err != nil {
		return err
	}
	if role != domain.RoleOwner {
		return domain.ErrOwnerRequired
	}
	return nil
}
