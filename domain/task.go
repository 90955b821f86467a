package domain

import (
	"time"

	"github.com/google/uuid"
)

// TaskStatus is the state of a domain task (a store verification, a media processing, a
// transfer, a publication, a sync, an AI task). Transitions are compare-and-set in the
// database: pending → running → succeeded | failed, so a redelivered job finds the task
// where the previous delivery left it and does not repeat a finished step.
type TaskStatus string

// Task statuses.
const (
	TaskPending   TaskStatus = "pending"
	TaskRunning   TaskStatus = "running"
	TaskSucceeded TaskStatus = "succeeded"
	TaskFailed    TaskStatus = "failed"
)

// Terminal reports whether s is final.
func (s TaskStatus) Terminal() bool { return s == TaskSucceeded || s == TaskFailed }

// Task is the state every domain task shares.
type Task struct {
	ID          uuid.UUID
	WorkspaceID uuid.UUID
	OperationID uuid.UUID
	Status      TaskStatus
	Attempts    int
	// Reconciliations counts how often the task was found stuck (not finished, not moving)
	// and delivered again (see Reconcile).
	Reconciliations int
	ErrorCode       string
	ErrorMessage    string
	Version         int
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// NewTask returns a pending task.
func NewTask(id, workspaceID, operationID uuid.UUID, now time.Time) Task {
	return Task{ID: id, WorkspaceID: workspaceID, OperationID: operationID, Status: TaskPending, Version: 1, CreatedAt: now, UpdatedAt: now}
}

// ErrTaskFinished is returned when a finished task is asked to change.
var ErrTaskFinished = NewError(KindConflict, "TASK_FINISHED", "the task has finished")

// Start moves pending → running and counts the attempt; a running task (a redelivery after
// a crash) stays running with one more attempt. A finished task is ErrTaskFinished.
func (t *Task) Start(now time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	t.Status, t.UpdatedAt = TaskRunning, now
	t.Attempts++
	t.Version++
	return nil
}

// Succeed finishes the task.
func (t *Task) Succeed(now time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	t.Status, t.UpdatedAt = TaskSucceeded, now
	t.Version++
	return nil
}

// Fail finishes the task with a client-safe code and message (made storable: see boundText,
// at most MaxTaskErrorLength characters).
func (t *Task) Fail(code, message string, now time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	t.Status, t.ErrorCode, t.ErrorMessage, t.UpdatedAt = TaskFailed, code, boundText(message, MaxTaskErrorLength), now
	t.Version++
	return nil
}

// Touch marks the unfinished task moved at now (a last look requested: it is not stuck). A
// finished task is ErrTaskFinished.
func (t *Task) Touch(now time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	t.UpdatedAt = now
	t.Version++
	return nil
}

// Task failure codes that the engine records, whatever the flow.
var (
	// ErrDeliveryExhausted fails a task that was delivered again MaxReconciliations times and
	// still did not finish.
	ErrDeliveryExhausted = NewError(KindUnavailable, "DELIVERY_EXHAUSTED",
		"the task was delivered again several times and never finished")
	// ErrJobStalled fails a task whose job stopped with its worker more often than allowed
	// (a worker that keeps dying on the same job).
	ErrJobStalled = NewError(KindUnavailable, "JOB_STALLED",
		"the task's worker stopped repeatedly while running it")
)

// Reconcile counts one more delivery of a stuck task (see Reconciliations) and marks it
// moved at now, so that it is not taken for stuck again before the threshold passes anew.
// It reports whether the task may be delivered again: false when it already was max times
// (the caller then fails it with ErrDeliveryExhausted). A finished task is ErrTaskFinished.
func (t *Task) Reconcile(max int, now time.Time) (bool, error) {
	if t.Status.Terminal() {
		return false, ErrTaskFinished
	}
	if t.Reconciliations >= max {
		return false, nil
	}
	t.Reconciliations++
	t.UpdatedAt = now
	t.Version++
	return true, nil
}

// Requested is a task that can rebuild the event that asked for it, from its own state. The
// engine sends that event again, under a new id, when the task stopped moving (its job failed
// outside a handler, or was lost with Redis).
type Requested interface {
	// RequestEvent returns the event that requested the task, as the command published it.
	RequestEvent() Event
}
