package port

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
)

// Page asks for one page of a newest-first list. Cursor is opaque ("" = first page).
type Page struct {
	Limit  int
	Cursor string
}

// Products stores products of the transaction's workspace. Every method runs in the
// transaction carried by ctx.
type Products interface {
	Insert(ctx context.Context, p domain.Product) error
	Get(ctx context.Context, id uuid.UUID) (domain.Product, error)
	// Update loads the product under a row lock, lets fn change it and saves the result.
	Update(ctx context.Context, id uuid.UUID, fn func(*domain.Product) error) (domain.Product, error)
	List(ctx context.Context, page Page) (items []domain.Product, next string, err error)
}

// Transactor runs fn in one RLS transaction scoped to a workspace and user, committing when
// fn returns nil. Queries and worker steps use it; commands get theirs from the bus.
type Transactor interface {
	InTx(ctx context.Context, workspaceID, userID uuid.UUID, fn func(ctx context.Context) error) error
}

// GroupTransactor is a Transactor that can also commit a short step together with the
// concurrent steps of other goroutines (group commit): InGroupTx runs fn in a transaction
// scoped to workspaceID that may hold other workspaces' steps too, each under its own scope,
// and returns once it committed, or fn's error. When the shared transaction fails, fn runs
// again alone: fn must set what it hands out on every run. key names what fn locks and
// changes (a task id): two steps of one key never share a transaction.
type GroupTransactor interface {
	Transactor
	InGroupTx(ctx context.Context, workspaceID, key uuid.UUID, fn func(ctx context.Context) error) error
}

// GroupTimeout bounds one group transaction of a GroupTransactor, from its connection to its
// COMMIT. A step that runs in a group ends with it, whatever its own context: InGroupTx
// returns at most GroupTimeout after ctx's end (a step whose context has ended when its
// group starts is not run).
const GroupTimeout = 2 * time.Second

// Clock tells the time; tests may fix it.
type Clock func() time.Time
