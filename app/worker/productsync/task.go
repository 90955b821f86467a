package productsync

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Flow registers the product syncs with the engine (app/worker/flows lists it): its declaration,
// and its task kind and handler built from the dependencies they need.
var Flow = worker.Register(worker.Spec{
	Name:            "product_sync",
	Queue:           worker.QueueProductSync,
	Table:           "product_syncs",
	Request:         domain.ProductSyncRequested{},
	TaskIDField:     "sync_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrProductSyncNotFound,
	Operation:       domain.OpProductSync,
	StartedBy:       "a product sync",
	Messages: []worker.Message{
		{Type: "listing.start_product_sync", Method: http.MethodPost, Path: "/stores/{store_id}/product-syncs"},
	},
	LastLook: worker.CannotAsk("a sync only reads the platform: it reads it again whole"),
}, tasks, handler)

// Tasks describes the product syncs to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, syncs port.Repository[domain.ProductSync]) worker.Kind[domain.ProductSync] {
	return worker.Kind[domain.ProductSync]{QueueName: worker.QueueProductSync, Deps: d, Tasks: syncs, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.ProductSyncRequested) uuid.UUID { return e.SyncID })}
}

// kindNeeds are what the task kind is built from, in every process.
type kindNeeds struct {
	Deps  worker.Deps
	Syncs port.Repository[domain.ProductSync]
}

func tasks(n kindNeeds) (worker.TaskKind, error) { return Tasks(n.Deps, n.Syncs), nil }

// handlerNeeds are what the handler is built from, in a process that consumes jobs.
type handlerNeeds struct {
	Deps        worker.Deps
	Syncs       port.ProductSyncs
	Stores      port.Stores
	Cipher      port.CredentialCipher
	Marketplace port.Marketplace
}

func handler(n handlerNeeds) (worker.Handler, error) {
	return New(Config{Deps: n.Deps, Syncs: n.Syncs, Stores: n.Stores, Cipher: n.Cipher, Marketplace: n.Marketplace})
}
