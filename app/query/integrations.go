package query

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Integrations lists one page of the workspace's integration principals, newest first,
// revoked ones included; never their secrets. Only an owner of the workspace may
// (domain.ErrOwnerRequired).
func (q Queries) Integrations(ctx context.Context, s Scope, page port.Page) ([]domain.Integration, string, error) {
	var items []domain.Integration
	var next string
	err := q.Tx.InTx(ctx, s.WorkspaceID, s.UserID, func(ctx context.Context) error {
		role, err := q.Accounts.Role(ctx, s.WorkspaceID, s.UserID)
		if err != nil {
			return err
		}
		if role != domain.RoleOwner {
			return domain.ErrOwnerRequired
		}
		items, next, err = q.Principals.List(ctx, page)
		return err
	})
	return items, next, err
}

// Principal returns the integration id of workspace workspaceID with its sealed secret, for
// the check of a command's signature: domain.ErrIntegrationNotFound when the workspace has
// no such integration (whether it does not exist or belongs to another workspace). A revoked
// integration is returned as such; the caller refuses it.
func (q Queries) Principal(ctx context.Context, workspaceID, id uuid.UUID) (domain.Integration, port.SealedSecret, error) {
	var in domain.Integration
	var secret port.SealedSecret
	err := q.Tx.InTx(ctx, workspaceID, uuid.Nil, func(ctx context.Context) error {
		var err error
		in, secret, err = q.Principals.Secret(ctx, id)
		return err
	})
	return in, secret, err
}
