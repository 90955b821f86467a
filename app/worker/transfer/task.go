package transfer

import (
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Tasks describes the material transfers to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, transfers port.Repository[domain.MaterialTransfer]) worker.Kind[domain.MaterialTransfer] {
	return worker.Kind[domain.MaterialTransfer]{QueueName: worker.QueueMaterialTransfer, Deps: d, Tasks: transfers, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.MaterialTransferRequested) uuid.UUID { return e.TransferID })}
}
