package aitask

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Flow registers the AI tasks with the engine (app/worker/flows lists it): its declaration,
// and its task kind and handler built from the dependencies they need.
var Flow = worker.Register(worker.Spec{
	Name:            "ai_task",
	Queue:           worker.QueueAITask,
	Table:           "ai_tasks",
	Request:         domain.AITaskRequested{},
	TaskIDField:     "ai_task_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrAITaskNotFound,
	Operation:       domain.OpAITask,
	StartedBy:       "an AI task",
	Messages: []worker.Message{
		{Type: "listing.create_ai_task", Method: http.MethodPost, Path: "/ai-tasks"},
	},
	LastLook: worker.CannotAsk("the AI provider keeps no record of a completion to ask for"),
}, tasks, handler)

// Tasks describes the AI tasks to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task. A final failure also writes
// the task's ledger row (no usage known), so that every finished task has one.
func Tasks(d worker.Deps, tasks port.Repository[domain.AITask], ledger port.AILedger) worker.Kind[domain.AITask] {
	return worker.Kind[domain.AITask]{QueueName: worker.QueueAITask, Deps: d, Tasks: tasks, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.AITaskRequested) uuid.UUID { return e.AITaskID }),
		OnFail: func(ctx context.Context, t domain.AITask, _ worker.Failure) error {
			_, err := ledger.Record(ctx, t, port.Usage{}, "")
			return err
		}}
}

// kindNeeds are what the task kind is built from, in every process.
type kindNeeds struct {
	Deps   worker.Deps
	Tasks  port.Repository[domain.AITask]
	Ledger port.AILedger
}

func tasks(n kindNeeds) (worker.TaskKind, error) { return Tasks(n.Deps, n.Tasks, n.Ledger), nil }

// handlerNeeds are what the handler is built from, in a process that consumes jobs.
type handlerNeeds struct {
	Deps     worker.Deps
	Tasks    port.Repository[domain.AITask]
	Products port.Products
	Ledger   port.AILedger
	Provider port.AIProvider
	Storage  port.ObjectStorage
	Settings worker.Settings
}

func handler(n handlerNeeds) (worker.Handler, error) {
	return New(Config{Deps: n.Deps, Tasks: n.Tasks, Products: n.Products, Ledger: n.Ledger, Provider: n.Provider,
		Storage: n.Storage, TextModel: n.Settings.AITextModel, CallTimeout: 2 * n.Settings.AITimeout})
}
