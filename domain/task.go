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
	ID           uuid.UUID
	WorkspaceID  uuid.UUID
	OperationID  uuid.UUID
	Status       TaskStatus
	Attempts     int
	ErrorCode    string
	ErrorMessage string
	Version      int
	CreatedAt    time.Time
	UpdatedAt    time.Time
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

// Fail finishes the task with a client-safe code and message.
func (t *Task) Fail(code, message string, now time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	t.Status, t.ErrorCode, t.ErrorMessage, t.UpdatedAt = TaskFailed, code, message, now
	t.Version++
	return nil
}
