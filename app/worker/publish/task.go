package publish

import (
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Tasks describes the publications to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, pubs port.Repository[domain.Publication]) worker.Kind[domain.Publication] {
	return worker.Kind[domain.Publication]{QueueName: worker.QueueListingPublish, Deps: d, Tasks: pubs, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.PublicationRequested) uuid.UUID { return e.PublicationID })}
}
