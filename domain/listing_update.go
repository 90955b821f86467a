package domain

import (
	"time"

	"github.com/google/uuid"
)

// ListingUpdate pushes one product revision to the platform product of a publication that
// has been published (docs/http-api.md: listing updates). The command takes the
// product's current revision and freezes its content in Snapshot; the worker replaces the
// platform listing's content with it (the gateway's PUT /v1/products/{id}), unless the
// platform already holds that revision or a later one (see Publication.PushedRevision and
// app/worker/listingupdate).
type ListingUpdate struct {
	Task
	PublicationID uuid.UUID
	ProductID     uuid.UUID
	StoreID       uuid.UUID
	// ProductRevision is the revision pushed (Snapshot.Revision == ProductRevision).
	ProductRevision int
	// Snapshot is the content of ProductRevision, captured by the command and never changed.
	Snapshot ProductSnapshot
	// Outcome is how a succeeded update ended (UpdatePushed or UpdateSuperseded); empty
	// until then.
	Outcome string
}

// Outcomes of a succeeded listing update.
const (
	// UpdatePushed: the platform listing was replaced with the update's revision.
	UpdatePushed = "pushed"
	// UpdateSuperseded: nothing was sent, the platform holding this revision or a later one
	// already (or a later one having been sent by another update).
	UpdateSuperseded = "superseded"
)

// Listing update error codes.
var (
	ErrListingUpdateNotFound = NewError(KindNotFound, "LISTING_UPDATE_NOT_FOUND", "the listing update does not exist")
	// ErrPublicationNotPublished refuses an update of a publication that has not succeeded
	// (there is no platform product to update yet).
	ErrPublicationNotPublished = NewError(KindConflict, "PUBLICATION_NOT_PUBLISHED",
		"the publication has not been published yet; wait for it to succeed")
	// ErrListingUpdateBusy is what a delivery of an update meets while another update of the
	// same publication is being pushed: it waits (RetryAfter) and tries again.
	ErrListingUpdateBusy = NewError(KindUnavailable, "LISTING_UPDATE_BUSY",
		"another update of this listing is being pushed; retry later")
)

// NewListingUpdate returns a pending update of pub's platform product to the product's
// current revision, with that revision's content as its Snapshot. Call it with the product
// read in the transaction that inserts the update.
func NewListingUpdate(id, operationID uuid.UUID, pub Publication, product Product, now time.Time) ListingUpdate {
	return ListingUpdate{Task: NewTask(id, pub.WorkspaceID, operationID, now), PublicationID: pub.ID,
		ProductID: product.ID, StoreID: pub.StoreID, ProductRevision: product.Revision, Snapshot: product.Snapshot()}
}

// ListingUpdateRequested asks a worker to push an update. Ids and the revision only: the
// content is the update's Snapshot.
type ListingUpdateRequested struct {
	UpdateID        uuid.UUID `json:"update_id"`
	OperationID     uuid.UUID `json:"operation_id"`
	PublicationID   uuid.UUID `json:"publication_id"`
	ProductRevision int       `json:"product_revision"`
	// StoreID is the publication's store: fair share's lane (its slots are per store).
	StoreID uuid.UUID `json:"store_id"`
}

// EventType implements Event.
func (ListingUpdateRequested) EventType() string { return "listing_update.requested" }

// AggregateType implements Event.
func (ListingUpdateRequested) AggregateType() string { return "listing_update" }

// AggregateID implements Event.
func (e ListingUpdateRequested) AggregateID() string { return e.UpdateID.String() }

func init() { RegisterEvent(ListingUpdateRequested{}) }

// RequestEvent implements Requested.
func (u ListingUpdate) RequestEvent() Event {
	return ListingUpdateRequested{UpdateID: u.ID, OperationID: u.OperationID, PublicationID: u.PublicationID,
		ProductRevision: u.ProductRevision, StoreID: u.StoreID}
}

// Published reports whether p has a platform product that updates can replace.
func (p Publication) Published() bool { return p.Status == TaskSucceeded && p.ExternalProductID != "" }

// PushClaim is the right to send the next PUT of a publication's platform product: held by
// one update until Until (a lease), so that two updates never push at once.
type PushClaim struct {
	UpdateID uuid.UUID // uuid.Nil: nobody holds it
	Until    time.Time
}

// HeldBy reports whether another update than id holds a live claim at now.
func (c PushClaim) HeldBy(id uuid.UUID, now time.Time) bool {
	return c.UpdateID != uuid.Nil && c.UpdateID != id && now.Before(c.Until)
}

// Claim gives p's push claim to update id until now+lease, and records that revision may
// be sent from now on (SentRevision only grows). The caller checked it may (see HeldBy).
func (p *Publication) Claim(id uuid.UUID, revision int, now time.Time, lease time.Duration) {
	p.Push = PushClaim{UpdateID: id, Until: now.Add(lease)}
	p.SentRevision = max(p.SentRevision, revision)
}

// Release drops update id's claim (nothing when another update holds it).
func (p *Publication) Release(id uuid.UUID) {
	if p.Push.UpdateID == id {
		p.Push = PushClaim{}
	}
}

// RecordPushed records that the platform holds revision (PushedRevision and SentRevision
// only grow: an older revision recorded late changes nothing).
func (p *Publication) RecordPushed(revision int) {
	p.PushedRevision = max(p.PushedRevision, revision)
	p.SentRevision = max(p.SentRevision, revision)
}
