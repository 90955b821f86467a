package domain

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// OperationStatus is the user-visible state of asynchronous work.
type OperationStatus string

// Operation statuses: pending → running → succeeded | failed. Terminal states never change.
const (
	OperationPending   OperationStatus = "pending"
	OperationRunning   OperationStatus = "running"
	OperationSucceeded OperationStatus = "succeeded"
	OperationFailed    OperationStatus = "failed"
)

// Terminal reports whether s is final.
func (s OperationStatus) Terminal() bool { return s == OperationSucceeded || s == OperationFailed }

// Operation tracks one piece of asynchronous work for the client (docs/http-api.md,
// "Operations"). Business tables and operations are the source of truth; the outbox only
// delivers.
type Operation struct {
	ID           uuid.UUID
	WorkspaceID  uuid.UUID
	Type         string
	Status       OperationStatus
	ResourceType string
	ResourceID   uuid.UUID
	// Result is a small JSON object of ids and counts; never secrets or storage keys.
	Result json.RawMessage
	// ErrorCode and ErrorMessage are safe for clients: codes and fixed messages, never raw
	// errors of external systems.
	ErrorCode    string
	ErrorMessage string
	Version      int
	CreatedBy    uuid.UUID
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// NewOperation returns a pending operation about a resource.
func NewOperation(workspaceID, createdBy uuid.UUID, typ, resourceType string, resourceID uuid.UUID, now time.Time) Operation {
	return Operation{ID: NewID(), WorkspaceID: workspaceID, Type: typ, Status: OperationPending,
		ResourceType: resourceType, ResourceID: resourceID, Version: 1, CreatedBy: createdBy, CreatedAt: now, UpdatedAt: now}
}

// Operation error codes.
var (
	// ErrOperationNotFound: no such operation in the caller's workspace.
	ErrOperationNotFound = NewError(KindNotFound, "OPERATION_NOT_FOUND", "the operation does not exist")
	// ErrOperationFinished is returned when a finished operation is asked to change.
	ErrOperationFinished = NewError(KindConflict, "OPERATION_FINISHED", "the operation has finished")
)

// Start moves pending → running. It reports false (no change) when already running; a
// finished operation is ErrOperationFinished.
func (o *Operation) Start(now time.Time) (bool, error) {
	switch o.Status {
	case OperationPending:
		o.Status, o.UpdatedAt = OperationRunning, now
		o.Version++
		return true, nil
	case OperationRunning:
		return false, nil
	}
	return false, ErrOperationFinished
}

// Succeed finishes the operation with a result.
func (o *Operation) Succeed(result json.RawMessage, now time.Time) error {
	if o.Status.Terminal() {
		return ErrOperationFinished
	}
	o.Status, o.Result, o.UpdatedAt = OperationSucceeded, result, now
	o.Version++
	return nil
}

// Fail finishes the operation with a client-safe error; the message is made storable (see
// boundText, at most MaxOperationErrorLength characters).
func (o *Operation) Fail(code, message string, now time.Time) error {
	if o.Status.Terminal() {
		return ErrOperationFinished
	}
	o.Status, o.ErrorCode, o.ErrorMessage, o.UpdatedAt = OperationFailed, code, boundText(message, MaxOperationErrorLength), now
	o.Version++
	return nil
}

// OperationStatusChanged is emitted when an operation is accepted (pending) and when it
// finishes (succeeded or failed), in the transaction of that change, so integrations can
// follow it. Its start (running) emits nothing: the finish carries StartedAt instead, which
// saves every job an outbox row and its dispatch; GET of the operation shows its current
// state, running included.
type OperationStatusChanged struct {
	// OperationID is the operation's id (GET /v1/workspaces/{ws}/operations/{id}).
	OperationID uuid.UUID `json:"operation_id"`
	// Type is the operation's type, e.g. "store.verification", "publication", "product_sync".
	Type string `json:"type"`
	// Status is the new status: pending (accepted), succeeded or failed (finished). Running
	// is not published (events written before 2026-12-03 may say running): a finished
	// operation's started_at says when it started.
	Status OperationStatus `json:"status" jsonschema:"enum=pending,enum=succeeded,enum=failed"`
	// ResourceType and ResourceID name what the operation works on, e.g. "publication".
	ResourceType string    `json:"resource_type"`
	ResourceID   uuid.UUID `json:"resource_id"`
	// Version counts the operation's changes from 1 (pending), its start included (a
	// finished operation that ran is at version 3); events may arrive out of order or
	// twice: the highest version is the current state.
	Version int `json:"version"`
	// StartedAt is when a finished operation started running (RFC 3339, UTC); absent when it
	// finished without having started (e.g. its task was refused or given up before any
	// delivery began it).
	StartedAt *time.Time `json:"started_at,omitempty"`
	// ErrorCode is the client-safe error code of a failed operation.
	ErrorCode string `json:"error_code,omitempty"`
}

// EventType implements Event.
func (OperationStatusChanged) EventType() string { return "operation.status_changed" }

// AggregateType implements Event.
func (OperationStatusChanged) AggregateType() string { return "operation" }

// AggregateID implements Event.
func (e OperationStatusChanged) AggregateID() string { return e.OperationID.String() }

// StatusChanged returns the event of o's current state.
func (o Operation) StatusChanged() OperationStatusChanged {
	return OperationStatusChanged{OperationID: o.ID, Type: o.Type, Status: o.Status, ResourceType: o.ResourceType,
		ResourceID: o.ResourceID, Version: o.Version, ErrorCode: o.ErrorCode}
}

// RunningSince is when a running operation started, and false when o is not running. A
// running operation changes no more until it finishes (Start again changes nothing), so its
// UpdatedAt is the time Start moved it.
func (o Operation) RunningSince() (time.Time, bool) {
	if o.Status != OperationRunning {
		return time.Time{}, false
	}
	return o.UpdatedAt, true
}

// Finished returns the event of o's finish: StatusChanged with StartedAt, the start of the
// run that ended (before's RunningSince; before is o as it was before it finished).
func (o Operation) Finished(before Operation) OperationStatusChanged {
	ev := o.StatusChanged()
	if at, ok := before.RunningSince(); ok {
		at = at.UTC()
		ev.StartedAt = &at
	}
	return ev
}

func init() {
	RegisterIntegrationEvent(OperationStatusChanged{}, "An operation was accepted (pending) or finished (succeeded or failed), "+
		"in the transaction that changed it. Its start is not published (it would cost every job a third outbox row and its "+
		"dispatch): the finish carries started_at, when it started running, and GET /v1/workspaces/{ws}/operations/{id} "+
		"shows its current state, running included.")
}
