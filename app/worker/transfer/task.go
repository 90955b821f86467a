package transfer

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Spec declares the material transfers to the engine (app/worker/flows registers it).
var Spec = worker.Spec{
	Name:            "material_transfer",
	Queue:           worker.QueueMaterialTransfer,
	Table:           "material_transfers",
	Request:         domain.MaterialTransferRequested{},
	TaskIDField:     "transfer_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrTransferNotFound,
	Operation:       commands.OpMaterialTransfer,
	StartedBy:       "a material transfer",
	Messages: []worker.Message{
		{Type: "listing.create_material_transfer", Method: http.MethodPost, Path: "/material-transfers"},
	},
	LastLook: worker.CannotAsk("a source URL keeps no record of a fetch: the material is fetched again"),
}

// Tasks describes the material transfers to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, transfers port.Repository[domain.MaterialTransfer]) worker.Kind[domain.MaterialTransfer] {
	return worker.Kind[domain.MaterialTransfer]{QueueName: Spec.Queue, Deps: d, Tasks: transfers, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.MaterialTransferRequested) uuid.UUID { return e.TransferID })}
}
