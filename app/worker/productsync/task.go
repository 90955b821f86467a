package productsync

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Spec declares the product syncs to the engine (app/worker/flows registers it).
var Spec = worker.Spec{
	Name:            "product_sync",
	Queue:           worker.QueueProductSync,
	Table:           "product_syncs",
	Request:         domain.ProductSyncRequested{},
	TaskIDField:     "sync_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrProductSyncNotFound,
	Operation:       commands.OpProductSync,
	StartedBy:       "a product sync",
	Messages: []worker.Message{
		{Type: "listing.start_product_sync", Method: http.MethodPost, Path: "/stores/{store_id}/product-syncs"},
	},
	LastLook: worker.CannotAsk("a sync only reads the platform: it reads it again whole"),
}

// Tasks describes the product syncs to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, syncs port.Repository[domain.ProductSync]) worker.Kind[domain.ProductSync] {
	return worker.Kind[domain.ProductSync]{QueueName: Spec.Queue, Deps: d, Tasks: syncs, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.ProductSyncRequested) uuid.UUID { return e.SyncID })}
}
