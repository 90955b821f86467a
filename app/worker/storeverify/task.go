package storeverify

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Spec declares the store verifications to the engine (app/worker/flows registers it).
var Spec = worker.Spec{
	Name:            "store_verification",
	Queue:           worker.QueueStoreVerification,
	Table:           "store_verifications",
	Request:         domain.StoreVerificationRequested{},
	TaskIDField:     "verification_id",
	AggregateColumn: "store_id",
	NotFound:        domain.ErrStoreVerificationNotFound,
	Operation:       commands.OpStoreVerification,
	StartedBy:       "creating a store, replacing its credentials, verifying again",
	Messages: []worker.Message{
		{Type: "listing.create_store", Method: http.MethodPost, Path: "/stores"},
		{Type: "listing.replace_store_authorization", Method: http.MethodPut, Path: "/stores/{store_id}/authorization"},
		{Type: "listing.verify_store", Method: http.MethodPost, Path: "/stores/{store_id}/verifications"},
	},
	LastLook: worker.CannotAsk("a verification changes nothing upstream: the credentials are checked again"),
}

// Tasks describes the store verifications to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, verifications port.Repository[domain.StoreVerification]) worker.Kind[domain.StoreVerification] {
	return worker.Kind[domain.StoreVerification]{QueueName: Spec.Queue, Deps: d, Tasks: verifications, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.StoreVerificationRequested) uuid.UUID { return e.VerificationID })}
}
