package storeverify

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Flow registers the store verifications with the engine (app/worker/flows lists it): its declaration,
// and its task kind and handler built from the dependencies they need.
var Flow = worker.Register(worker.Spec{
	Name:            "store_verification",
	Queue:           worker.QueueStoreVerification,
	Table:           "store_verifications",
	Request:         domain.StoreVerificationRequested{},
	TaskIDField:     "verification_id",
	AggregateColumn: "store_id",
	NotFound:        domain.ErrStoreVerificationNotFound,
	Operation:       domain.OpStoreVerification,
	StartedBy:       "creating a store, replacing its credentials, verifying again",
	Messages: []worker.Message{
		{Type: "listing.create_store", Method: http.MethodPost, Path: "/stores"},
		{Type: "listing.replace_store_authorization", Method: http.MethodPut, Path: "/stores/{store_id}/authorization"},
		{Type: "listing.verify_store", Method: http.MethodPost, Path: "/stores/{store_id}/verifications"},
	},
	LastLook: worker.CannotAsk("a verification changes nothing upstream: the credentials are checked again"),
}, tasks, handler)

// Tasks describes the store verifications to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, verifications port.Repository[domain.StoreVerification]) worker.Kind[domain.StoreVerification] {
	return worker.Kind[domain.StoreVerification]{QueueName: worker.QueueStoreVerification, Deps: d, Tasks: verifications, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.StoreVerificationRequested) uuid.UUID { return e.VerificationID })}
}

// kindNeeds are what the task kind is built from, in every process.
type kindNeeds struct {
	Deps          worker.Deps
	Verifications port.Repository[domain.StoreVerification]
}

func tasks(n kindNeeds) (worker.TaskKind, error) { return Tasks(n.Deps, n.Verifications), nil }

// handler builds the handler from its Config, every field provided.
func handler(c Config) (worker.Handler, error) { return New(c) }
