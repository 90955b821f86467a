package storeverify

import (
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Tasks describes the store verifications to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, verifications port.Repository[domain.StoreVerification]) worker.Kind[domain.StoreVerification] {
	return worker.Kind[domain.StoreVerification]{QueueName: worker.QueueStoreVerification, Deps: d, Tasks: verifications, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.StoreVerificationRequested) uuid.UUID { return e.VerificationID })}
}
