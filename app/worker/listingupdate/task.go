package listingupdate

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Flow registers the listing updates with the engine (app/worker/flows lists it): its
// declaration, and its task kind and handler built from the dependencies they need.
var Flow = worker.Register(worker.Spec{
	Name:            "listing_update",
	Queue:           worker.QueueListingUpdate,
	Table:           "listing_updates",
	Request:         domain.ListingUpdateRequested{},
	TaskIDField:     "update_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrListingUpdateNotFound,
	Operation:       domain.OpListingUpdate,
	StartedBy:       "a listing update",
	LastLook:        worker.CannotAsk("the platform's product does not say which update it holds"),
	Resource: &worker.Resource{Parent: "/publications/{publication_id}", ParentTable: "publications",
		ParentNotFound: domain.ErrPublicationNotFound, Path: "updates", IDParam: "update_id", Key: "update",
		GetOperation: "getListingUpdate", ListOperation: "listListingUpdates", Body: Body},
}, tasks, handler)

// kindNeeds are what the task kind is built from, in every process.
type kindNeeds struct {
	Deps         worker.Deps
	Updates      port.Repository[domain.ListingUpdate]
	Publications port.Repository[domain.Publication]
}

func tasks(n kindNeeds) (worker.TaskKind, error) {
	return Tasks(n.Deps, n.Updates, n.Publications), nil
}

// handlerNeeds are what the handler is built from, in a process that consumes jobs.
type handlerNeeds struct {
	Deps         worker.Deps
	Updates      port.Repository[domain.ListingUpdate]
	Publications port.Repository[domain.Publication]
	Stores       port.Stores
	Cipher       port.CredentialCipher
	Marketplace  port.Marketplace
	Settings     worker.Settings
}

func handler(n handlerNeeds) (worker.Handler, error) {
	// The push claim outlives any call of the adapter (the lease rule, doc.go).
	return New(Config{Deps: n.Deps, Updates: n.Updates, Publications: n.Publications, Stores: n.Stores,
		Cipher: n.Cipher, Marketplace: n.Marketplace, Lease: 4 * n.Settings.PlatformTimeout,
		CallTimeout: 2 * n.Settings.PlatformTimeout})
}

// Body is the JSON of a listing update (domain.ListingUpdate) in the API.
func Body(task any) any {
	u := task.(domain.ListingUpdate)
	return body{ID: u.ID.String(), PublicationID: u.PublicationID.String(), ProductID: u.ProductID.String(),
		ProductRevision: u.ProductRevision, Status: string(u.Status), Outcome: u.Outcome, Error: worker.TaskError(u.Task),
		CreatedAt: u.CreatedAt.UTC(), UpdatedAt: u.UpdatedAt.UTC()}
}

type body struct {
	ID              string `json:"id"`
	PublicationID   string `json:"publication_id"`
	ProductID       string `json:"product_id"`
	ProductRevision int    `json:"product_revision"`
	Status          string `json:"status"`
	// Outcome is "pushed" or "superseded" once succeeded, else omitted.
	Outcome   string            `json:"outcome,omitempty"`
	Error     *worker.ErrorJSON `json:"error"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// Tasks describes the listing updates to the engine (worker.TaskKind). A final failure,
// however it is recorded, releases the update's push claim on its publication.
func Tasks(d worker.Deps, updates port.Repository[domain.ListingUpdate], pubs port.Repository[domain.Publication]) worker.Kind[domain.ListingUpdate] {
	return worker.Kind[domain.ListingUpdate]{QueueName: worker.QueueListingUpdate, Deps: d, Tasks: updates, TaskOf: taskOf,
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
