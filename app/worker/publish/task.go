package publish

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Spec declares the publications to the engine (app/worker/flows registers it).
var Spec = worker.Spec{
	Name:            "publication",
	Queue:           worker.QueueListingPublish,
	Table:           "publications",
	Request:         domain.PublicationRequested{},
	TaskIDField:     "publication_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrPublicationNotFound,
	Operation:       commands.OpPublication,
	StartedBy:       "a first publication",
	Messages: []worker.Message{
		{Type: "listing.publish", Method: http.MethodPost, Path: "/products/{product_id}/publications"},
	},
	LastLook: worker.Asks("finds the product by external_ref (Handler.lastLook) and records the publication succeeded when the platform holds it"),
}

// Tasks describes the publications to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, pubs port.Repository[domain.Publication]) worker.Kind[domain.Publication] {
	return worker.Kind[domain.Publication]{QueueName: Spec.Queue, Deps: d, Tasks: pubs, TaskOf: taskOf,
		TaskID:       worker.PayloadID(func(e domain.PublicationRequested) uuid.UUID { return e.PublicationID }),
		AsksLastLook: Spec.LastLook.Asks != ""}
}
