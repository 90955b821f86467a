package domain

import (
	"strings"
	"time"

	"github.com/google/uuid"
)

// Integration is an integration principal: another service allowed to send commands as
// messages to one workspace, signing each with its secret. It acts as a user of its own
// (UserID, a user of kind integration that cannot log in, member of the workspace until
// revoked). The secret is not part of the aggregate: it is sealed when the integration is
// created and read only to check a command's signature.
type Integration struct {
	ID          uuid.UUID
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
	Name        string
	CreatedBy   uuid.UUID
	CreatedAt   time.Time
	// RevokedAt is set once the integration is revoked: its commands are refused from then on.
	RevokedAt *time.Time
}

// Integration error codes.
var (
	ErrIntegrationNotFound = NewError(KindNotFound, "INTEGRATION_NOT_FOUND", "the integration does not exist")
	// ErrOwnerRequired: the workspace's owners only may manage its integrations.
	ErrOwnerRequired = NewError(KindForbidden, "OWNER_REQUIRED", "only an owner of the workspace may do this")
)

// NewIntegration validates the name and returns a live integration acting as user.
func NewIntegration(id, workspaceID, user, createdBy uuid.UUID, name string, now time.Time) (Integration, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return Integration{}, Invalid("name", "required")
	}
	if err := checkLine("name", name, MaxIntegrationNameLength); err != nil {
		return Integration{}, err
	}
	return Integration{ID: id, WorkspaceID: workspaceID, UserID: user, Name: name, CreatedBy: createdBy, CreatedAt: now}, nil
}

// Revoked reports whether the integration is revoked.
func (i Integration) Revoked() bool { return i.RevokedAt != nil }

// Revoke revokes the integration at now; revoking it again keeps the first time.
func (i *Integration) Revoke(now time.Time) {
	if i.RevokedAt == nil {
		i.RevokedAt = &now
	}
}
