package publish

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Flow registers the publications with the engine (app/worker/flows lists it): its declaration,
// and its task kind and handler built from the dependencies they need.
var Flow = worker.Register(worker.Spec{
	Name:            "publication",
	Queue:           worker.QueueListingPublish,
	Table:           "publications",
	Request:         domain.PublicationRequested{},
	TaskIDField:     "publication_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrPublicationNotFound,
	Operation:       domain.OpPublication,
	StartedBy:       "a first publication",
	Messages: []worker.Message{
		{Type: "listing.publish", Method: http.MethodPost, Path: "/products/{product_id}/publications"},
	},
	LastLook: worker.Asks("finds the product by external_ref (Handler.lastLook) and records the publication succeeded when the platform holds it"),
}, tasks, handler)

// Tasks describes the publications to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, pubs port.Repository[domain.Publication]) worker.Kind[domain.Publication] {
	return worker.Kind[domain.Publication]{QueueName: worker.QueueListingPublish, Deps: d, Tasks: pubs, TaskOf: taskOf,
		TaskID:       worker.PayloadID(func(e domain.PublicationRequested) uuid.UUID { return e.PublicationID }),
		AsksLastLook: true}
}

// kindNeeds are what the task kind is built from, in every process.
type kindNeeds struct {
	Deps         worker.Deps
	Publications port.Repository[domain.Publication]
}

func tasks(n kindNeeds) (worker.TaskKind, error) { return Tasks(n.Deps, n.Publications), nil }

// handlerNeeds are what the handler is built from, in a process that consumes jobs.
type handlerNeeds struct {
	Deps         worker.Deps
	Publications port.Repository[domain.Publication]
	Products     port.Products
	Stores       port.Stores
	Cipher       port.CredentialCipher
	Marketplace  port.Marketplace
	Budget       *worker.StoreBudget
	Settings     worker.Settings
}

// handler builds the handler; its call (a find, then a create) is fenced by two platform
// time-outs.
func handler(n handlerNeeds) (worker.Handler, error) {
	return New(Config{Deps: n.Deps, Publications: n.Publications, Products: n.Products, Stores: n.Stores, Cipher: n.Cipher,
		Marketplace: n.Marketplace, Budget: n.Budget, CallTimeout: 2 * n.Settings.PlatformTimeout})
}
