// Package query holds the read side: each query runs in its own RLS transaction through
// port.Transactor, so a caller sees only its workspace's rows.
package query

import (
	"context"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Scope is who reads and in which workspace.
type Scope struct {
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
}

// Queries is the catalogue of reads.
type Queries struct {
	Tx       port.Transactor
	Accounts port.Accounts
	Products port.Products
}

// IsMember reports whether the user belongs to the workspace. Callers answer 404 when not,
// so that workspace ids do not leak.
func (q Queries) IsMember(ctx context.Context, s Scope) (bool, error) {
	var ok bool
	err := q.Tx.InTx(ctx, s.WorkspaceID, s.UserID, func(ctx context.Context) error {
		var err error
		ok, err = q.Accounts.IsMember(ctx, s.WorkspaceID, s.UserID)
		return err
	})
	return ok, err
}

// Workspaces lists the workspaces of a user.
func (q Queries) Workspaces(ctx context.Context, user uuid.UUID) ([]domain.Workspace, error) {
	var out []domain.Workspace
	err := q.Tx.InTx(ctx, uuid.Nil, user, func(ctx context.Context) error {
		var err error
		out, err = q.Accounts.WorkspacesOf(ctx, user)
		return err
	})
	return out, err
}

// Product returns one product of the workspace.
func (q Queries) Product(ctx context.Context, s Scope, id uuid.UUID) (domain.Product, error) {
	var p domain.Product
	err := q.Tx.InTx(ctx, s.WorkspaceID, s.UserID, func(ctx context.Context) error {
		var err error
		p, err = q.Products.Get(ctx, id)
		return err
	})
	return p, err
}

// ProductList lists the workspace's products, newest first.
func (q Queries) ProductList(ctx context.Context, s Scope, page port.Page) ([]domain.Product, string, error) {
	var items []domain.Product
	var next string
	err := q.Tx.InTx(ctx, s.WorkspaceID, s.UserID, func(ctx context.Context) error {
		var err error
		items, next, err = q.Products.List(ctx, page)
		return err
	})
	return items, next, err
}
