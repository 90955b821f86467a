package aitask

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Spec declares the AI tasks to the engine (app/worker/flows registers it).
var Spec = worker.Spec{
	Name:            "ai_task",
	Queue:           worker.QueueAITask,
	Table:           "ai_tasks",
	Request:         domain.AITaskRequested{},
	TaskIDField:     "ai_task_id",
	AggregateColumn: "id",
	NotFound:        domain.ErrAITaskNotFound,
	Operation:       commands.OpAITask,
	StartedBy:       "an AI task",
	Messages: []worker.Message{
		{Type: "listing.create_ai_task", Method: http.MethodPost, Path: "/ai-tasks"},
	},
	LastLook: worker.CannotAsk("the AI provider keeps no record of a completion to ask for"),
}

// Tasks describes the AI tasks to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task. A final failure also writes
// the task's ledger row (no usage known), so that every finished task has one.
func Tasks(d worker.Deps, tasks port.Repository[domain.AITask], ledger port.AILedger) worker.Kind[domain.AITask] {
	return worker.Kind[domain.AITask]{QueueName: Spec.Queue, Deps: d, Tasks: tasks, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.AITaskRequested) uuid.UUID { return e.AITaskID }),
		OnFail: func(ctx context.Context, t domain.AITask, _ worker.Failure) error {
			_, err := ledger.Record(ctx, t, port.Usage{}, "")
			return err
		}}
}
