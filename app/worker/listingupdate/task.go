package listingupdate

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Spec declares the listing updates to the engine (app/worker/flows registers it).
var Spec = worker.Spec{
	Name:            "listing_update",
	Queue:           worker.QueueListingUpdate,
	Table:           "listing_updates",
	Request:         domain.ListingUpdateRequested{},
	TaskIDField:     "update_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrListingUpdateNotFound,
	Operation:       commands.OpListingUpdate,
	StartedBy:       "a listing update",
	LastLook:        worker.CannotAsk("the platform's product does not say which update it holds"),
}

// Tasks describes the listing updates to the engine (worker.TaskKind). A final failure,
// however it is recorded, releases the update's push claim on its publication.
func Tasks(d worker.Deps, updates port.Repository[domain.ListingUpdate], pubs port.Repository[domain.Publication]) worker.Kind[domain.ListingUpdate] {
	return worker.Kind[domain.ListingUpdate]{QueueName: Spec.Queue, Deps: d, Tasks: updates, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.ListingUpdateRequested) uuid.UUID { return e.UpdateID }),
		OnFail: func(ctx context.Context, u domain.ListingUpdate, _ worker.Failure) error {
			return release(ctx, pubs, u)
		}}
}

// release drops u's push claim, if it holds it, in the caller's transaction.
func release(ctx context.Context, pubs port.Repository[domain.Publication], u domain.ListingUpdate) error {
	_, err := pubs.Update(ctx, u.PublicationID, func(p *domain.Publication) error {
		p.Release(u.ID)
		return nil
	})
	if errors.Is(err, domain.ErrNotFound) {
		return nil // deleted with its product or store: nothing to release
	}
	return err
}

// taskOf gives worker.Kind the task state an update embeds.
func taskOf(u *domain.ListingUpdate) *domain.Task { return &u.Task }
