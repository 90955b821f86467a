package port

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// StuckTasks finds domain tasks that stopped moving: not finished, and not changed since a
// given time. It serves the reconciler (app/reconcile).
type StuckTasks interface {
	// Workspaces returns up to limit workspaces holding a task unfinished since before, the
	// longest-waiting first. It runs outside any transaction and returns ids only.
	Workspaces(ctx context.Context, before time.Time, limit int) ([]uuid.UUID, error)
	// Find returns up to limit of the queue's tasks in the transaction's workspace that are
	// unfinished since before and not owed a delivery by the outbox (no request event of
	// theirs is pending or being dispatched), oldest first, and locks them; tasks locked by
	// another transaction are skipped. A task delivered again n times without running
	// (domain.Task.Redeliveries) backs off: it is found only when unfinished since before −
	// backoff × (2^min(n, MaxRedeliveryDoublings) − 1). It must run inside a transaction.
	Find(ctx context.Context, queue string, before time.Time, backoff time.Duration, limit int) ([]StuckTask, error)
	// Exclusive runs fn unless another process is running an Exclusive fn of the same name,
	// and reports whether fn ran. The exclusion ends with fn, or with this process.
	Exclusive(ctx context.Context, name string, fn func(ctx context.Context) error) (bool, error)
}

// StuckTask is a task StuckTasks.Find returned.
type StuckTask struct {
	ID uuid.UUID
	// LastJobID is the job id of the task's latest delivered request event (its outbox
	// event id); empty when none is left.
	LastJobID string
	// FirstDispatchedAt is when the task's request event was first dispatched; zero when the
	// outbox no longer knows.
	FirstDispatchedAt time.Time
}

// MaxRedeliveryDoublings caps the backoff of a task delivered again without running
// (StuckTasks.Find): after this many redeliveries it waits 2^MaxRedeliveryDoublings − 1
// times the backoff more, each time.
const MaxRedeliveryDoublings = 6

// JobProbe tells whether the queues still hold jobs unfinished: waiting, delayed or
// running. A task whose last job is unfinished is not stuck, only queued.
type JobProbe interface {
	// Unfinished reports, for each of the queue's job ids, whether it is unfinished.
	Unfinished(ctx context.Context, queue string, jobIDs []string) (map[string]bool, error)
}

// TaskTable is where a queue's tasks live, as an implementation of StuckTasks finds them:
// the task table, and how the task's request event is known to the outbox (its aggregate
// type, the table's column holding the aggregate id, the payload field holding the task id).
type TaskTable struct {
	Queue, Table, AggregateType, AggregateColumn, TaskIDField string
}

// TaskGuards checks the declared guards (sql/060_task_guards.sql) of one task: what must
// hold of the aggregates its row names (a store connected) for it to run.
type TaskGuards interface {
	// Check returns the domain.GuardError of the first guard that does not hold of the
	// aggregates of task id of queue, nil when all hold. It runs in the caller's transaction
	// and locks those aggregates' rows FOR KEY SHARE until it ends.
	Check(ctx context.Context, queue string, id uuid.UUID) error
	// Unfinished counts the pending or running tasks, in every task table with column, whose
	// column is id (a store's tasks: "store_id"), in the caller's transaction and workspace.
	Unfinished(ctx context.Context, column string, id uuid.UUID) (int, error)
}
