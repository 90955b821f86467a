// Package query holds the read side: each query runs in its own RLS transaction through
// port.Transactor, so a caller sees only its workspace's rows.
package query

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Scope is who reads and in which workspace.
type Scope struct {
	WorkspaceID uuid.UUID
	UserID      uuid.UUID
}

// Queries is the catalogue of reads. Generic reads of any repository go through Get and List.
type Queries struct {
	// Verifications are the stores' verifications, listed under their store.
	Verifications port.StoreVerifications

	Tx           port.Transactor
	Accounts     port.Accounts
	Products     port.Products
	Operations   port.Repository[domain.Operation]
	Stores       port.Stores
	Media        port.Repository[domain.Media]
	Transfers    port.Repository[domain.MaterialTransfer]
	Publications port.Publications
	Syncs        port.ProductSyncs
	AITasks      port.Repository[domain.AITask]
	// Tasks read the tasks of the flows' task resources (worker.Resource), by task table.
	Tasks map[string]port.TaskReader
	// Principals are the integration principals (Integrations, Principal).
	Principals port.Integrations
	Storage    port.ObjectStorage
	Fetcher    port.Fetcher
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

// Get reads one aggregate of the scope's workspace from repo.
func Get[T any](ctx context.Context, tx port.Transactor, s Scope, repo port.Repository[T], id uuid.UUID) (T, error) {
	var v T
	err := tx.InTx(ctx, s.WorkspaceID, s.UserID, func(ctx context.Context) error {
		var err error
		v, err = repo.Get(ctx, id)
		return err
	})
	return v, err
}

// List reads one page of the scope's workspace from repo, newest first.
func List[T any](ctx context.Context, tx port.Transactor, s Scope, repo port.Repository[T], page port.Page) ([]T, string, error) {
	var items []T
	var next string
	err := tx.InTx(ctx, s.WorkspaceID, s.UserID, func(ctx context.Context) error {
		var err error
		items, next, err = repo.List(ctx, page)
		return err
	})
	return items, next, err
}

// MediaObject commits a media's uploaded bytes as its original (port.ObjectStorage.CommitUpload:
// once; a committed original is never replaced) and returns their size, or -1 when nothing
// was uploaded yet. It calls storage, so it runs outside any transaction.
func (q Queries) MediaObject(ctx context.Context, s Scope, mediaID uuid.UUID) (int64, error) {
	info, err := q.Storage.CommitUpload(ctx, domain.MediaObjectKey(s.WorkspaceID, mediaID))
	if errors.Is(err, port.ErrObjectNotFound) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	return info.Size, nil
}

// CheckSourceURL refuses a material source that is malformed or leads to a forbidden
// address, before anything is written.
func (q Queries) CheckSourceURL(ctx context.Context, sourceURL string) error {
	if err := domain.ValidateSourceURL(sourceURL); err != nil {
		return err
	}
	return q.Fetcher.CheckURL(ctx, sourceURL)
}

// Task returns the task id of table whose parentColumn is parentID (a task resource).
func (q Queries) Task(ctx context.Context, s Scope, table, parentColumn string, parentID, id uuid.UUID) (any, error) {
	var v any
	err := q.Tx.InTx(ctx, s.WorkspaceID, s.UserID, func(ctx context.Context) error {
		r, err := q.reader(table)
		if err != nil {
			return err
		}
		v, err = r.GetUnder(ctx, id, parentColumn, parentID)
		return err
	})
	return v, err
}

// TaskList lists parentID's tasks of table, newest first; an unknown parent is
// domain.ErrNotFound.
func (q Queries) TaskList(ctx context.Context, s Scope, table, parentTable, parentColumn string, parentID uuid.UUID, page port.Page) ([]any, string, error) {
	var items []any
	var next string
	err := q.Tx.InTx(ctx, s.WorkspaceID, s.UserID, func(ctx context.Context) error {
		r, err := q.reader(table)
		if err != nil {
			return err
		}
		items, next, err = r.ListUnder(ctx, parentTable, parentColumn, parentID, page)
		return err
	})
	return items, next, err
}

// reader is table's TaskReader; the assembly gives every task resource one.
func (q Queries) reader(table string) (port.TaskReader, error) {
	r, ok := q.Tasks[table]
	if !ok {
		return nil, fmt.Errorf("query: no TaskReader of task table %s", table)
	}
	return r, nil
}

// under reads one page of a parent's children in one transaction: parent returns the
// parent's not-found error when the workspace has no such parent.
func under[T any](ctx context.Context, q Queries, s Scope, parent func(ctx context.Context) error,
	list func(ctx context.Context) ([]T, string, error)) ([]T, string, error) {
	var items []T
	var next string
	err := q.Tx.InTx(ctx, s.WorkspaceID, s.UserID, func(ctx context.Context) error {
		if err := parent(ctx); err != nil {
			return err
		}
		var err error
		items, next, err = list(ctx)
		return err
	})
	return items, next, err
}

// StoreSyncs lists the store's product syncs, newest first; an unknown store is
// domain.ErrStoreNotFound.
func (q Queries) StoreSyncs(ctx context.Context, s Scope, storeID uuid.UUID, page port.Page) ([]domain.ProductSync, string, error) {
	return under(ctx, q, s, func(ctx context.Context) error { _, err := q.Stores.Get(ctx, storeID); return err },
		func(ctx context.Context) ([]domain.ProductSync, string, error) {
			return q.Syncs.ListOf(ctx, storeID, page)
		})
}

// StoreVerifications lists the store's verifications, newest first; an unknown store is
// domain.ErrStoreNotFound.
func (q Queries) StoreVerifications(ctx context.Context, s Scope, storeID uuid.UUID, page port.Page) ([]domain.StoreVerification, string, error) {
	return under(ctx, q, s, func(ctx context.Context) error { _, err := q.Stores.Get(ctx, storeID); return err },
		func(ctx context.Context) ([]domain.StoreVerification, string, error) {
			return q.Verifications.ListOf(ctx, storeID, page)
		})
}

// ProductPublications lists the product's publications, newest first; an unknown product is
// domain.ErrProductNotFound.
func (q Queries) ProductPublications(ctx context.Context, s Scope, productID uuid.UUID, page port.Page) ([]domain.Publication, string, error) {
	return under(ctx, q, s, func(ctx context.Context) error { _, err := q.Products.Get(ctx, productID); return err },
		func(ctx context.Context) ([]domain.Publication, string, error) {
			return q.Publications.ListOfProduct(ctx, productID, page)
		})
}
