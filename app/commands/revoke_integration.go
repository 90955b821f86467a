package commands

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// RevokeIntegration revokes an integration principal: its commands are refused from then on
// and it stops being a member of the workspace. Only an owner may; revoking twice is
// harmless (the first time stays).
type RevokeIntegration struct {
	IntegrationID uuid.UUID
	WorkspaceID   uuid.UUID
	UserID        uuid.UUID // the owner who revokes it
}

// CommandName implements bus.Command.
func (RevokeIntegration) CommandName() string { return "RevokeIntegration" }

// RevokeIntegrationHandler handles RevokeIntegration.
type RevokeIntegrationHandler struct {
	accounts     port.Accounts
	integrations port.Integrations
	now          port.Clock
}

// NewRevokeIntegrationHandler returns the handler. It panics on a nil dependency.
func NewRevokeIntegrationHandler(accounts port.Accounts, integrations port.Integrations, now port.Clock) RevokeIntegrationHandler {
	mustHave("RevokeIntegrationHandler", accounts, integrations, now)
	return RevokeIntegrationHandler{accounts: accounts, integrations: integrations, now: now}
}

// Handle implements bus.Handler: OWNER_REQUIRED for a non-owner, INTEGRATION_NOT_FOUND for
// an integration the workspace does not have, else the integration as revoked.
func (h RevokeIntegrationHandler) Handle(ctx context.Context, cmd RevokeIntegration) (domain.Integration, error) {
	if err := requireOwner(ctx, h.accounts, cmd.WorkspaceID, cmd.UserID); err != nil {
		return domain.Integration{}, err
	}
	return h.integrations.Revoke(ctx, cmd.IntegrationID, h.now().UTC().Truncate(time.Microsecond)) // as stored
}
