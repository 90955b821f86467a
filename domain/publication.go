package domain

import (
	"time"

	"github.com/google/uuid"
)

// Publication is the first publish of a product to a store (seed §5). At most one
// publication per product and store is ever active or done (a partial unique index); a
// failed one may be replaced by a new request.
type Publication struct {
	Task
	ProductID         uuid.UUID
	StoreID           uuid.UUID
	ProductRevision   int
	ExternalProductID string // the platform's id, once created
}

// ExternalRef is what the platform product carries to find it again: our publication id. It
// is also the Idempotency-Key of the create call.
func (p Publication) ExternalRef() string { return p.ID.String() }

// Publication error codes.
var (
	ErrPublicationNotFound     = NewError(KindNotFound, "PUBLICATION_NOT_FOUND", "the publication does not exist")
	ErrProductAlreadyPublished = NewError(KindConflict, "PRODUCT_ALREADY_PUBLISHED",
		"the product is already published, or being published, to this store")
)

// NewPublication returns a pending publication of a product revision.
func NewPublication(id, workspaceID, operationID, productID, storeID uuid.UUID, productRevision int, now time.Time) Publication {
	return Publication{Task: NewTask(id, workspaceID, operationID, now), ProductID: productID, StoreID: storeID, ProductRevision: productRevision}
}

// PublicationRequested asks a worker to create the platform product.
type PublicationRequested struct {
	PublicationID   uuid.UUID `json:"publication_id"`
	OperationID     uuid.UUID `json:"operation_id"`
	ProductID       uuid.UUID `json:"product_id"`
	StoreID         uuid.UUID `json:"store_id"`
	ProductRevision int       `json:"product_revision"`
}

// EventType implements Event.
func (PublicationRequested) EventType() string { return "publication.requested" }

// AggregateType implements Event.
func (PublicationRequested) AggregateType() string { return "publication" }

// AggregateID implements Event.
func (e PublicationRequested) AggregateID() string { return e.PublicationID.String() }

func init() { RegisterEvent(PublicationRequested{}) }
