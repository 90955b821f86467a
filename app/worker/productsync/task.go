package productsync

import (
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Tasks describes the product syncs to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, syncs port.Repository[domain.ProductSync]) worker.Kind[domain.ProductSync] {
	return worker.Kind[domain.ProductSync]{QueueName: worker.QueueProductSync, Deps: d, Tasks: syncs, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.ProductSyncRequested) uuid.UUID { return e.SyncID })}
}
