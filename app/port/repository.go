package port

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
)

// Repository stores one kind of aggregate of the transaction's workspace. Every method runs
// in the transaction carried by ctx (opened by the command bus or a Transactor) and fails
// without one.
type Repository[T any] interface {
	// Insert adds v. When a unique rule of the table refuses it (one active sync per store,
	// one first publication per product and store, …) Insert returns that rule's domain
	// error and writes nothing.
	Insert(ctx context.Context, v T) error
	// Get returns the aggregate, or the kind's not-found domain error.
	Get(ctx context.Context, id uuid.UUID) (T, error)
	// Update loads the aggregate under a row lock, lets fn change it and saves it. When fn
	// returns an error nothing is saved and the error is returned.
	Update(ctx context.Context, id uuid.UUID, fn func(*T) error) (T, error)
	// List returns one page, newest first.
	List(ctx context.Context, page Page) (items []T, next string, err error)
}

// UpdaterAtCommit is a Repository whose Update can also save with the transaction's COMMIT:
// UpdateAtCommit loads the aggregate under a row lock and lets fn change it as Update does,
// but its write is queued to travel to the database in the COMMIT's round trip (one round
// trip less). The transaction must neither read the row again nor update it a second time
// after it (it would see the row as it was); a write the database refuses fails the COMMIT.
type UpdaterAtCommit[T any] interface {
	UpdateAtCommit(ctx context.Context, id uuid.UUID, fn func(*T) error) (T, error)
}

// TaskReader reads a flow's tasks under their parent, whatever their type (the API's
// derived task resources, worker.Resource). Like Repository it runs in ctx's transaction.
type TaskReader interface {
	// GetUnder returns the task id whose parentColumn is parentID, or the kind's not-found
	// domain error (also for a task of another parent).
	GetUnder(ctx context.Context, id uuid.UUID, parentColumn string, parentID uuid.UUID) (any, error)
	// ListUnder returns one page of parentID's tasks, newest first; domain.ErrNotFound when
	// parentTable has no row parentID.
	ListUnder(ctx context.Context, parentTable, parentColumn string, parentID uuid.UUID, page Page) ([]any, string, error)
}

// SealedCredentials are a store's credentials as stored: AEAD ciphertext and the id of the
// key that sealed it. Only a worker opens them, right before calling the platform.
type SealedCredentials struct {
	Ciphertext []byte
	KeyID      string
}

// Stores adds to Repository what is special about stores: their sealed credentials.
type Stores interface {
	Repository[domain.Store]
	// SetCredentials stores sealed credentials for the store (on create and replace).
	SetCredentials(ctx context.Context, storeID uuid.UUID, c SealedCredentials) error
	// Credentials returns the sealed credentials and the version they belong to.
	Credentials(ctx context.Context, storeID uuid.UUID) (SealedCredentials, int, error)
	// Refusal returns the domain.GuardError of the first declared guard of stores
	// (sql/060_task_guards.sql) that does not hold of the store, nil when all hold: what a
	// task naming it would be refused. It locks the store's row FOR KEY SHARE.
	Refusal(ctx context.Context, storeID uuid.UUID) error
}

// ProductSyncs adds the lookup of a store's active sync.
type ProductSyncs interface {
	Repository[domain.ProductSync]
	// Active returns the store's pending or running sync, or domain.ErrProductSyncNotFound.
	Active(ctx context.Context, storeID uuid.UUID) (domain.ProductSync, error)
	// UpsertPlatformProducts records a page of the store's online products.
	UpsertPlatformProducts(ctx context.Context, storeID, syncID uuid.UUID, items []PlatformProduct) error
	// ListOf returns one page of the store's syncs, newest first.
	ListOf(ctx context.Context, storeID uuid.UUID, page Page) (items []domain.ProductSync, next string, err error)
}

// StoreVerifications adds the list of one store's verifications.
type StoreVerifications interface {
	Repository[domain.StoreVerification]
	// ListOf returns one page of the store's verifications, newest first.
	ListOf(ctx context.Context, storeID uuid.UUID, page Page) (items []domain.StoreVerification, next string, err error)
}

// Publications adds the list of one product's publications.
type Publications interface {
	Repository[domain.Publication]
	// ListOfProduct returns one page of the product's publications, newest first.
	ListOfProduct(ctx context.Context, productID uuid.UUID, page Page) (items []domain.Publication, next string, err error)
}

// ListingUpdates adds the list of one publication's updates.
type ListingUpdates interface {
	Repository[domain.ListingUpdate]
	// ListOf returns one page of the publication's updates, newest first.
	ListOf(ctx context.Context, publicationID uuid.UUID, page Page) (items []domain.ListingUpdate, next string, err error)
}

// AILedger bills AI usage: one row per task, whatever happens.
type AILedger interface {
	// Record inserts the task's usage unless it is already recorded; it reports whether
	// this call inserted it.
	Record(ctx context.Context, task domain.AITask, usage Usage, model string) (bool, error)
}

// SealedSecret is an integration's secret as stored: AEAD ciphertext (sealed with
// IntegrationSecretAD) and the id of the key that sealed it.
type SealedSecret struct {
	Ciphertext []byte
	KeyID      string
}

// Integrations stores integration principals. Every method runs in the caller's RLS
// transaction and sees the transaction's workspace only.
type Integrations interface {
	// Create inserts the integration's user (kind integration, no email, no password), its
	// membership of the workspace, and the integration with its sealed secret.
	Create(ctx context.Context, in domain.Integration, secret SealedSecret) error
	// Get returns the integration, or domain.ErrIntegrationNotFound.
	Get(ctx context.Context, id uuid.UUID) (domain.Integration, error)
	// List returns one page of the workspace's integrations (revoked ones too), newest first.
	List(ctx context.Context, page Page) (items []domain.Integration, next string, err error)
	// Revoke sets revoked_at (once) and removes the integration's membership; it returns the
	// integration as revoked, or domain.ErrIntegrationNotFound.
	Revoke(ctx context.Context, id uuid.UUID, at time.Time) (domain.Integration, error)
	// Secret returns the integration with its sealed secret, or domain.ErrIntegrationNotFound.
	Secret(ctx context.Context, id uuid.UUID) (domain.Integration, SealedSecret, error)
}

type locksOperationKey struct{}

// LockingOperation marks ctx for a step that changes a task and then its operation (the worker's
// lifecycle): a task repository's locking read (Update, UpdateAtCommit) in it also locks and
// reads the task's operation, in the same round trip (PostgreSQL: the same statement), and the
// operations repository's next locking read of that operation in the transaction returns it
// without a round trip of its own. The locks are taken in the order task, then operation, as
// the step would take them. An adapter that cannot do so ignores the mark.
func LockingOperation(ctx context.Context) context.Context {
	return context.WithValue(ctx, locksOperationKey{}, true)
}

// LockPreloader is a task repository whose locking read of a task and its operation (as
// under LockingOperation) a group transaction (GroupTransactor) can send ahead of its steps.
// PreloadLocking marks ctx, the context given to InGroupTx, with that read of task id: the
// group sends the reads of all its steps so marked in one round trip, each under its step's
// workspace scope, before the first step runs, and keeps the rows, locked; a locking read of
// such a row by any step of the group (Update, UpdateAtCommit) then takes it without a round
// trip, unless a step of the group wrote the row since (then it is read again). Rows are
// locked in the order of the group's steps, earlier than each step would lock them. An
// adapter that cannot ignores the mark; outside InGroupTx it changes nothing.
type LockPreloader interface {
	PreloadLocking(ctx context.Context, id uuid.UUID) context.Context
}

type checksGuardsKey struct{}

// CheckingGuards marks ctx, with LockingOperation, for a step that checks the declared
// guards of the task it locks (TaskGuards.Check): the task repository's locking read of the
// task (or the read a group transaction sends ahead, LockPreloader) also checks them, in the
// same statement, under the same locks Check takes, and TaskGuards.Check of that task in the
// step's transaction answers from it without a statement of its own. An adapter that cannot
// ignores the mark (Check then runs its own statement).
func CheckingGuards(ctx context.Context) context.Context {
	return context.WithValue(ctx, checksGuardsKey{}, true)
}

// ChecksGuards reports whether ctx was marked with CheckingGuards.
func ChecksGuards(ctx context.Context) bool {
	v, _ := ctx.Value(checksGuardsKey{}).(bool)
	return v
}

// LocksOperation reports whether ctx was marked with LockingOperation.
func LocksOperation(ctx context.Context) bool {
	v, _ := ctx.Value(locksOperationKey{}).(bool)
	return v
}
