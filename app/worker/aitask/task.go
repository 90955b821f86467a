package aitask

import (
	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
)

// Tasks describes the AI tasks to the engine (worker.TaskKind): a job failed outside the
// handler, or a task lost with its job, still reaches the task.
func Tasks(d worker.Deps, tasks port.Repository[domain.AITask]) worker.Kind[domain.AITask] {
	return worker.Kind[domain.AITask]{QueueName: worker.QueueAITask, Deps: d, Tasks: tasks, TaskOf: taskOf,
		TaskID: worker.PayloadID(func(e domain.AITaskRequested) uuid.UUID { return e.AITaskID })}
}
