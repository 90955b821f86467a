package domain

import (
	"time"

	"github.com/google/uuid"
)

// ProductSync is a full sync of a store's online products into our database, page by page.
// It is resumable: the next page token is saved with each page, so a redelivered job goes
// on from the last saved page. One sync per store is active at a time (a partial unique index).
type ProductSync struct {
	Task
	StoreID       uuid.UUID
	NextPageToken string
	PagesDone     int
	ItemsSynced   int
}

// Product sync error codes.
var (
	ErrProductSyncNotFound      = NewError(KindNotFound, "PRODUCT_SYNC_NOT_FOUND", "the product sync does not exist")
	ErrProductSyncAlreadyActive = NewError(KindConflict, "PRODUCT_SYNC_ALREADY_ACTIVE", "a product sync of this store is already active")
)

// NewProductSync returns a pending sync.
func NewProductSync(id, workspaceID, operationID, storeID uuid.UUID, now time.Time) ProductSync {
	return ProductSync{Task: NewTask(id, workspaceID, operationID, now), StoreID: storeID}
}

// ProductSyncRequested asks a worker to run a sync.
type ProductSyncRequested struct {
	SyncID      uuid.UUID `json:"sync_id"`
	OperationID uuid.UUID `json:"operation_id"`
	StoreID     uuid.UUID `json:"store_id"`
}

// EventType implements Event.
func (ProductSyncRequested) EventType() string { return "product_sync.requested" }

// AggregateType implements Event.
func (ProductSyncRequested) AggregateType() string { return "product_sync" }

// AggregateID implements Event.
func (e ProductSyncRequested) AggregateID() string { return e.SyncID.String() }

func init() { RegisterEvent(ProductSyncRequested{}) }

// RequestEvent implements Requested.
func (s ProductSync) RequestEvent() Event {
	return ProductSyncRequested{SyncID: s.ID, OperationID: s.OperationID, StoreID: s.StoreID}
}

// ProductSyncCompleted is emitted when a product sync read the store's last page. An
// integration event.
type ProductSyncCompleted struct {
	// SyncID is the product sync (GET /v1/workspaces/{ws}/product-syncs/{id}).
	SyncID uuid.UUID `json:"sync_id"`
	// OperationID is the operation of the sync request.
	OperationID uuid.UUID `json:"operation_id"`
	// StoreID is the store synced.
	StoreID uuid.UUID `json:"store_id"`
	// Pages and Items count the pages read and the platform products synced.
	Pages int `json:"pages"`
	Items int `json:"items"`
}

// EventType implements Event.
func (ProductSyncCompleted) EventType() string { return "product_sync.completed" }

// AggregateType implements Event.
func (ProductSyncCompleted) AggregateType() string { return "product_sync" }

// AggregateID implements Event.
func (e ProductSyncCompleted) AggregateID() string { return e.SyncID.String() }

// Completed returns the event of s's success.
func (s ProductSync) Completed() ProductSyncCompleted {
	return ProductSyncCompleted{SyncID: s.ID, OperationID: s.OperationID, StoreID: s.StoreID, Pages: s.PagesDone, Items: s.ItemsSynced}
}

func init() {
	RegisterIntegrationEvent(ProductSyncCompleted{}, "A full sync of a store's online products finished: every page was read and "+
		"the store's platform products are up to date.")
}
