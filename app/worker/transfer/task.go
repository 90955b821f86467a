package transfer

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Flow registers the material transfers with the engine (app/worker/flows lists it): its declaration,
// and its task kind and handler built from the dependencies they need.
var Flow = worker.Register(worker.Spec{
	Name:            "material_transfer",
	Queue:           worker.QueueMaterialTransfer,
	Table:           "material_transfers",
	Request:         domain.MaterialTransferRequested{},
	TaskIDField:     "transfer_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrTransferNotFound,
	Operation:       domain.OpMaterialTransfer,
	StartedBy:       "a material transfer",
	Messages: []worker.Message{
		{Type: "listing.create_material_transfer", Method: http.MethodPost, Path: "/material-transfers"},
	},
	LastLook: worker.CannotAsk("a source URL keeps no record of a fetch: the material is fetched again"),
}, tasks, handler)

// Tasks describes the material transfers to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, transfers port.Repository[domain.MaterialTransfer]) worker.Kind[domain.MaterialTransfer] {
	return worker.Kind[domain.MaterialTransfer]{QueueName: worker.QueueMaterialTransfer, Deps: d, Tasks: transfers, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.MaterialTransferRequested) uuid.UUID { return e.TransferID })}
}

// kindNeeds are what the task kind is built from, in every process.
type kindNeeds struct {
	Deps      worker.Deps
	Transfers port.Repository[domain.MaterialTransfer]
}

func tasks(n kindNeeds) (worker.TaskKind, error) { return Tasks(n.Deps, n.Transfers), nil }

// handlerNeeds are what the handler is built from, in a process that consumes jobs.
type handlerNeeds struct {
	Deps       worker.Deps
	Transfers  port.Repository[domain.MaterialTransfer]
	Media      port.Repository[domain.Media]
	MediaTasks port.Repository[domain.MediaTask]
	Storage    port.ObjectStorage
	Fetcher    port.Fetcher
	Settings   worker.Settings
}

func handler(n handlerNeeds) (worker.Handler, error) {
	return New(Config{Deps: n.Deps, Transfers: n.Transfers, Media: n.Media, MediaTasks: n.MediaTasks, Storage: n.Storage,
		Fetcher: n.Fetcher, MaxBytes: n.Settings.MediaMaxBytes})
}
