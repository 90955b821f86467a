package domain

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// OperationStatus is the user-visible state of asynchronous work.
type OperationStatus string

// Operation statuses: pending → running → succeeded | failed, or pending → cancelled.
// Terminal states never change.
const (
	OperationPending   OperationStatus = "pending"
	OperationRunning   OperationStatus = "running"
	OperationSucceeded OperationStatus = "succeeded"
	OperationFailed    OperationStatus = "failed"
	OperationCancelled OperationStatus = "cancelled"
)

// Terminal reports whether s is final.
func (s OperationStatus) Terminal() bool {
	return s == OperationSucceeded || s == OperationFailed || s == OperationCancelled
}

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
	// Progress is how far the work went, as its flow last reported it while running (nil:
	// never reported). It changes neither Version nor UpdatedAt: ProgressAt is its time.
	Progress   *Progress
	ProgressAt time.Time
}

// Progress is how far long work is: Done units of Total (nil when the total is unknown). A
// flow states its unit (product sync: products; material transfer: bytes).
type Progress struct {
	Done  int64  `json:"done"`
	Total *int64 `json:"total"`
}

// ProgressInterval is the least time between two progress reports of one operation that are
// kept (and announced).
const ProgressInterval = time.Second

// ReportProgress keeps p as o's progress when o is running and its last report is at least
// ProgressInterval old: it reports whether it did (then publish o.Progressed()).
func (o *Operation) ReportProgress(p Progress, now time.Time) bool {
	if o.Status != OperationRunning || (!o.ProgressAt.IsZero() && now.Sub(o.ProgressAt) < ProgressInterval) {
		return false
	}
	o.Progress, o.ProgressAt = &p, now
	return true
}

// OperationProgressed is emitted, at most once a second per operation, when a running
// operation's work advances: in the transaction that recorded the progress.
type OperationProgressed struct {
	// OperationID is the operation's id (GET /v1/workspaces/{ws}/operations/{id}).
	OperationID uuid.UUID `json:"operation_id"`
	// Type is the operation's type, e.g. "product_sync".
	Type string `json:"type"`
	// ResourceType and ResourceID name what the operation works on.
	ResourceType string    `json:"resource_type"`
	ResourceID   uuid.UUID `json:"resource_id"`
	// Done counts the units done; Total the units in all (null when unknown).
	Done  int64  `json:"done"`
	Total *int64 `json:"total" jsonschema:"nullable"`
	// At is when the progress was recorded (RFC 3339, UTC): of two events of one operation,
	// the later At is the current progress.
	At time.Time `json:"at"`
}

// EventType implements Event.
func (OperationProgressed) EventType() string { return "operation.progressed" }

// AggregateType implements Event.
func (OperationProgressed) AggregateType() string { return "operation" }

// AggregateID implements Event.
func (e OperationProgressed) AggregateID() string { return e.OperationID.String() }

// Progressed returns the event of o's current progress (o.Progress must be set).
func (o Operation) Progressed() OperationProgressed {
	ev := OperationProgressed{OperationID: o.ID, Type: o.Type, ResourceType: o.ResourceType, ResourceID: o.ResourceID,
		At: o.ProgressAt.UTC()}
	if o.Progress != nil {
		ev.Done, ev.Total = o.Progress.Done, o.Progress.Total
	}
	return ev
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
	// ErrOperationNotCancellable: the operation's type has no task to cancel.
	ErrOperationNotCancellable = NewError(KindConflict, "OPERATION_NOT_CANCELLABLE", "operations of this type cannot be cancelled")
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

// Cancel finishes a pending operation cancelled (its task never started). A running one is
// ErrTaskStarted, a finished one ErrOperationFinished.
func (o *Operation) Cancel(now time.Time) error {
	switch {
	case o.Status.Terminal():
		return ErrOperationFinished
	case o.Status != OperationPending:
		return ErrTaskStarted
	}
	o.Status, o.UpdatedAt = OperationCancelled, now
	o.Version++
	return nil
}

// OperationStatusChanged is emitted when an operation is accepted (pending) and when it
// finishes (succeeded, failed or cancelled), in the transaction of that change, so integrations can
// follow it. Its start (running) emits nothing: the finish carries StartedAt instead, which
// saves every job an outbox row and its dispatch; GET of the operation shows its current
// state, running included.
type OperationStatusChanged struct {
	// OperationID is the operation's id (GET /v1/workspaces/{ws}/operations/{id}).
	OperationID uuid.UUID `json:"operation_id"`
	// Type is the operation's type, e.g. "store.verification", "publication", "product_sync".
	Type string `json:"type"`
	// Status is the new status: pending (accepted), succeeded, failed or cancelled
	// (finished; cancelled: it never started, POST …/operations/{id}/cancel). Running is not
	// published (events written before 2026-12-03 may say running): a finished
	// operation's started_at says when it started.
	Status OperationStatus `json:"status" jsonschema:"enum=pending,enum=succeeded,enum=failed,enum=cancelled"`
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
	RegisterIntegrationEvent(OperationProgressed{}, "A running operation's long work advanced (product sync: products "+
		"synced; material transfer: bytes downloaded, of the source's length when it said it): at most once a second per "+
		"operation, in the transaction that recorded it. operation.status_changed still announces its finish.")
	RegisterIntegrationEvent(OperationStatusChanged{}, "An operation was accepted (pending) or finished (succeeded, failed, or cancelled before it started), "+
		"in the transaction that changed it. Its start is not published (it would cost every job a third outbox row and its "+
		"dispatch): the finish carries started_at, when it started running, and GET /v1/workspaces/{ws}/operations/{id} "+
		"shows its current state, running included.")
}

// Operation types (an operation's "type" field), one per flow. Stable.
const (
	OpStoreVerification = "store.verification"
	OpMediaProcessing   = "media.processing"
	OpMaterialTransfer  = "material_transfer"
	OpPublication       = "publication"
	OpProductSync       = "product_sync"
	OpAITask            = "ai_task"
	OpListingUpdate     = "listing_update"
	OpUnpublish         = "unpublish"
)
