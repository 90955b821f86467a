package domain

import (
	"time"

	"github.com/google/uuid"
)

// Publication is the first publish of a product to a store. At most one
// publication per product and store is ever active or done (a partial unique index); a
// failed one may be replaced by a new request.
//
// A publication publishes one product revision: ProductRevision, the revision the product
// had when the publication was requested, with its content frozen in Snapshot. Drafts saved
// after the request are not part of it.
type Publication struct {
	Task
	ProductID uuid.UUID
	StoreID   uuid.UUID
	// ProductRevision is the requested revision (also in PublicationRequested).
	ProductRevision int
	// Snapshot is the content of ProductRevision (Snapshot.Revision == ProductRevision),
	// captured with the request and never changed: it is what the worker publishes. Nil
	// only on a publication requested before snapshots existed (sql/007_task_snapshots.sql)
	// whose product had moved on by then; the worker captures it on its first start when
	// the product is still at ProductRevision, and refuses with
	// ErrProductRevisionUnavailable otherwise.
	Snapshot          *ProductSnapshot
	ExternalProductID string // the platform's id, once created

	// What listing updates (ListingUpdate) need to push revisions in order:
	//
	// PushedRevision is the highest revision the platform product is known to hold: set to
	// ProductRevision when the publication succeeds, raised by every update recorded as
	// pushed, never lowered. 0 before the first publish.
	PushedRevision int
	// SentRevision is the highest revision whose content may have been sent to the platform
	// (a PUT sent, its outcome perhaps unknown): >= PushedRevision, never lowered. An update
	// of an older revision is never sent (it could land after the newer content).
	SentRevision int
	// Push is the claim of the update whose PUT may be in flight (see PushClaim).
	Push PushClaim
	// UnpublishedAt is when an unpublish deleted the platform product (nil while published).
	// The publication's task status stays succeeded; the product may be published to the
	// store again, as a new publication.
	UnpublishedAt *time.Time
}

// ExternalRef is what the platform product carries to find it again: our publication id. It
// is also the Idempotency-Key of the create call.
func (p Publication) ExternalRef() string { return p.ID.String() }

// Publication error codes.
var (
	ErrPublicationNotFound     = NewError(KindNotFound, "PUBLICATION_NOT_FOUND", "the publication does not exist")
	ErrProductAlreadyPublished = NewError(KindConflict, "PRODUCT_ALREADY_PUBLISHED",
		"the product is already published, or being published, to this store")
	// ErrProductRevisionUnavailable fails a publication whose requested revision's content
	// is unknown (no Snapshot) and can no longer be read, the product having moved on: a
	// new request publishes the current revision.
	ErrProductRevisionUnavailable = NewError(KindConflict, "PRODUCT_REVISION_UNAVAILABLE",
		"the requested product revision can no longer be published; request the publication again")
)

// NewPublication returns a pending publication of the product's current revision, with that
// revision's content as its Snapshot. Call it with the product read in the transaction that
// inserts the publication.
func NewPublication(id, workspaceID, operationID uuid.UUID, product Product, storeID uuid.UUID, now time.Time) Publication {
	snap := product.Snapshot()
	return Publication{Task: NewTask(id, workspaceID, operationID, now), ProductID: product.ID, StoreID: storeID,
		ProductRevision: product.Revision, Snapshot: &snap}
}

// PublicationRequested asks a worker to create the platform product. It carries ids and the
// requested revision only; the content to publish is the publication's Snapshot.
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

// RequestEvent implements Requested.
func (p Publication) RequestEvent() Event {
	return PublicationRequested{PublicationID: p.ID, OperationID: p.OperationID, ProductID: p.ProductID, StoreID: p.StoreID, ProductRevision: p.ProductRevision}
}

// PublicationPublished is emitted when a publication succeeded: the platform holds the
// product, at ProductRevision. An integration event.
type PublicationPublished struct {
	// PublicationID is the publication (GET /v1/workspaces/{ws}/publications/{id}).
	PublicationID uuid.UUID `json:"publication_id"`
	// OperationID is the operation of the publish request.
	OperationID uuid.UUID `json:"operation_id"`
	// ProductID is the product published.
	ProductID uuid.UUID `json:"product_id"`
	// StoreID is the store it was published to.
	StoreID uuid.UUID `json:"store_id"`
	// ProductRevision is the product revision the platform product holds.
	ProductRevision int `json:"product_revision"`
	// ExternalProductID is the platform's id of the product.
	ExternalProductID string `json:"external_product_id"`
}

// EventType implements Event.
func (PublicationPublished) EventType() string { return "publication.published" }

// AggregateType implements Event.
func (PublicationPublished) AggregateType() string { return "publication" }

// AggregateID implements Event.
func (e PublicationPublished) AggregateID() string { return e.PublicationID.String() }

// PublishedEvent returns the event of p's success; call it once the platform product is recorded.
func (p Publication) PublishedEvent() PublicationPublished {
	return PublicationPublished{PublicationID: p.ID, OperationID: p.OperationID, ProductID: p.ProductID, StoreID: p.StoreID,
		ProductRevision: p.ProductRevision, ExternalProductID: p.ExternalProductID}
}

func init() {
	RegisterIntegrationEvent(PublicationPublished{}, "A product was published to a store: the platform holds it, at the revision "+
		"the publication was requested with. Published once per publication, in the transaction that records its success.")
}

// Unpublish deletes the platform product of a published publication; once it succeeded the
// publication is unpublished (Publication.UnpublishedAt). At most one unpublish of a
// publication is pending, running or succeeded (a failed one leaves it published).
type Unpublish struct {
	Task
	PublicationID     uuid.UUID
	StoreID           uuid.UUID
	ExternalProductID string // the platform product deleted
}

// Unpublish error codes.
var (
	ErrUnpublishNotFound = NewError(KindNotFound, "UNPUBLISH_NOT_FOUND", "the unpublish does not exist")
	// ErrPublicationUnpublished refuses an update or a second unpublish of a publication
	// whose unpublish was accepted (and has not failed or been cancelled). The error of a
	// guard (domain.GuardError): every other task of the publication is refused it, when it
	// is accepted and when it runs.
	ErrPublicationUnpublished = GuardError(NewError(KindConflict, "PUBLICATION_UNPUBLISHED",
		"the publication is unpublished, or being unpublished"))
	// ErrPublicationBusy: another change of the publication (a listing update) holds its push
	// claim; the unpublish waits for it (a snooze with Retry-After).
	ErrPublicationBusy = NewError(KindUnavailable, "PUBLICATION_BUSY",
		"another change of this publication is being pushed; retry later")
)

// NewUnpublish returns a pending unpublish of pub's platform product.
func NewUnpublish(id, operationID uuid.UUID, pub Publication, now time.Time) Unpublish {
	return Unpublish{Task: NewTask(id, pub.WorkspaceID, operationID, now), PublicationID: pub.ID, StoreID: pub.StoreID,
		ExternalProductID: pub.ExternalProductID}
}

// UnpublishRequested asks a worker to delete the platform product of an unpublish.
type UnpublishRequested struct {
	UnpublishID   uuid.UUID `json:"unpublish_id"`
	OperationID   uuid.UUID `json:"operation_id"`
	PublicationID uuid.UUID `json:"publication_id"`
	// StoreID is the publication's store: fair share's lane (its slots are per store).
	StoreID uuid.UUID `json:"store_id"`
}

// EventType implements Event.
func (UnpublishRequested) EventType() string { return "unpublish.requested" }

// AggregateType implements Event.
func (UnpublishRequested) AggregateType() string { return "unpublish" }

// AggregateID implements Event.
func (e UnpublishRequested) AggregateID() string { return e.UnpublishID.String() }

// RequestEvent implements Requested.
func (u Unpublish) RequestEvent() Event {
	return UnpublishRequested{UnpublishID: u.ID, OperationID: u.OperationID, PublicationID: u.PublicationID, StoreID: u.StoreID}
}

// PublicationUnpublished is emitted when an unpublish succeeded. An integration event.
type PublicationUnpublished struct {
	// PublicationID is the publication, now unpublished.
	PublicationID uuid.UUID `json:"publication_id"`
	// OperationID is the operation of the unpublish request.
	OperationID uuid.UUID `json:"operation_id"`
	// ProductID and StoreID are the product and the store it was published to.
	ProductID uuid.UUID `json:"product_id"`
	StoreID   uuid.UUID `json:"store_id"`
	// ExternalProductID is the platform's id of the product deleted.
	ExternalProductID string `json:"external_product_id"`
}

// EventType implements Event.
func (PublicationUnpublished) EventType() string { return "publication.unpublished" }

// AggregateType implements Event.
func (PublicationUnpublished) AggregateType() string { return "publication" }

// AggregateID implements Event.
func (e PublicationUnpublished) AggregateID() string { return e.PublicationID.String() }

func init() {
	RegisterEvent(UnpublishRequested{})
	RegisterIntegrationEvent(PublicationUnpublished{}, "A publication was unpublished: its platform product was deleted. "+
		"Published once per publication, in the transaction that records the unpublish's success.")
}
