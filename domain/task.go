package domain

import (
	"time"

	"github.com/google/uuid"
)

// TaskStatus is the state of a domain task (a store verification, a media processing, a
// transfer, a publication, a sync, an AI task). Transitions are compare-and-set in the
// database: pending → running → succeeded | failed, or pending → cancelled (Cancel, before
// any delivery started it), so a redelivered job finds the task where the previous delivery
// left it and does not repeat a finished step.
type TaskStatus string

// Task statuses.
const (
	TaskPending   TaskStatus = "pending"
	TaskRunning   TaskStatus = "running"
	TaskSucceeded TaskStatus = "succeeded"
	TaskFailed    TaskStatus = "failed"
	TaskCancelled TaskStatus = "cancelled"
)

// Terminal reports whether s is final.
func (s TaskStatus) Terminal() bool {
	return s == TaskSucceeded || s == TaskFailed || s == TaskCancelled
}

// Task is the state every domain task shares.
type Task struct {
	ID          uuid.UUID
	WorkspaceID uuid.UUID
	OperationID uuid.UUID
	Status      TaskStatus
	Attempts    int
	// Reconciliations counts how often the task was found stuck (not finished, not moving)
	// after it ran, and delivered again (see Reconcile): the deliveries that spend a try.
	Reconciliations int
	// Redeliveries counts how often the task was found stuck without having run since the
	// previous delivery (its job lost before any worker started it) and delivered again:
	// such deliveries spend no try; the task's age bounds them (see Reconcile).
	Redeliveries int
	// ReconciledAttempts is Attempts when the task was last delivered again: Attempts still
	// equal to it means the handler has not started since.
	ReconciledAttempts int
	// FirstDispatchedAt is when the task's request event was first dispatched, the origin of
	// its age; zero until the reconciler first meets the task.
	FirstDispatchedAt time.Time
	// HeldResult is the result of a successful external call whose record step gave up
	// (Hold), as its flow encodes it; nil when none is held. The next delivery records it
	// instead of calling again. A finished task holds none.
	HeldResult []byte
	// Look is the task's last look: the failure it holds until a look completes, and what
	// the look found (see AskLook).
	Look TaskLook
	// CallDeadline is when the external call of the task's latest run ends at the latest
	// (the call fence, see Fence); zero when no fenced call started, or the last one ended
	// with an error (Unfence).
	CallDeadline time.Time
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

// Fence records that the run started now makes an external call that ends by deadline (its
// flow runs the call under that deadline): until then, another delivery that finds the task
// running waits (Fenced), since the call of a worker that died may still land upstream. A
// finished task is ErrTaskFinished.
func (t *Task) Fence(deadline time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	t.CallDeadline = deadline
	return nil
}

// Fenced reports how long a delivery at now must wait before it may run the task: until the
// call deadline of a running task (Fence); zero, false when it may run now.
func (t *Task) Fenced(now time.Time) (time.Duration, bool) {
	if t.Status != TaskRunning || !t.CallDeadline.After(now) {
		return 0, false
	}
	return t.CallDeadline.Sub(now), true
}

// Unfence lifts the fence of the call that was to end by deadline, which ended (with an
// error: the delivery that made it no longer calls), so that the next delivery need not
// wait. A fence set since by another run, or none, is left alone; it reports whether it
// changed the task.
func (t *Task) Unfence(deadline time.Time, now time.Time) bool {
	if t.Status.Terminal() || t.CallDeadline.IsZero() || !t.CallDeadline.Equal(deadline) {
		return false
	}
	t.CallDeadline, t.UpdatedAt = time.Time{}, now
	t.Version++
	return true
}

// ErrTaskStarted is returned when a task that has started is asked to be cancelled: it
// finishes as it would.
var ErrTaskStarted = NewError(KindConflict, "OPERATION_RUNNING",
	"the operation has started: it is not cancelled and finishes as it would")

// Cancel ends a task that has not started (pending): cancelled, its work never done. A
// running task is ErrTaskStarted (it finishes as it would); a finished one ErrTaskFinished.
func (t *Task) Cancel(now time.Time) error {
	switch {
	case t.Status.Terminal():
		return ErrTaskFinished
	case t.Status != TaskPending:
		return ErrTaskStarted
	}
	t.Status, t.UpdatedAt, t.HeldResult = TaskCancelled, now, nil
	t.Version++
	return nil
}

// Succeed finishes the task.
func (t *Task) Succeed(now time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	t.Status, t.UpdatedAt, t.HeldResult = TaskSucceeded, now, nil
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
	t.HeldResult = nil
	t.Version++
	return nil
}

// Hold keeps result, the encoded result of a successful external call whose record step
// gave up, so that the next delivery records it instead of calling again (HeldResult). A
// finished task is ErrTaskFinished.
func (t *Task) Hold(result []byte, now time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	t.HeldResult, t.UpdatedAt = result, now
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
	// ErrDeliveryExhausted fails a task that ran and was delivered again MaxReconciliations
	// times and still did not finish, or whose handler never started before the task was
	// TASK_MAX_AGE old.
	ErrDeliveryExhausted = NewError(KindUnavailable, "DELIVERY_EXHAUSTED",
		"the task was delivered again several times and never finished")
	// ErrOutcomeUnknown fails a task whose last look could not complete before the task was
	// TASK_MAX_AGE old: the upstream may hold the work's result.
	ErrOutcomeUnknown = NewError(KindUnavailable, "OUTCOME_UNKNOWN",
		"the task did not finish and the platform could not be asked whether it holds the result: check there before trying again")
	// ErrJobStalled fails a task whose job stopped with its worker more often than allowed
	// (a worker that keeps dying on the same job).
	ErrJobStalled = NewError(KindUnavailable, "JOB_STALLED",
		"the task's worker stopped repeatedly while running it")
)

// Redelivery is what Reconcile decided for a stuck task.
type Redelivery int

// Decisions of Reconcile.
const (
	// RedeliverRun: the task ran since its previous delivery; this delivery spends one of
	// its tries (Reconciliations).
	RedeliverRun Redelivery = iota + 1
	// RedeliverUnrun: the task has not run since its previous delivery (its job was lost
	// before any worker started it); this delivery spends nothing (Redeliveries).
	RedeliverUnrun
	// RedeliveriesSpent: the task ran and was delivered again max times already.
	RedeliveriesSpent
	// RedeliveryTooOld: the task has not run since its previous delivery and is older than
	// the age bound.
	RedeliveryTooOld
)

// Ran reports whether the task's handler started since it was last delivered again.
func (t *Task) Ran() bool { return t.Attempts != t.ReconciledAttempts }

// Age returns how long ago the task was first dispatched (FirstDispatchedAt, else its
// creation) at now.
func (t *Task) Age(now time.Time) time.Duration {
	if t.FirstDispatchedAt.IsZero() {
		return now.Sub(t.CreatedAt)
	}
	return now.Sub(t.FirstDispatchedAt)
}

// Reconcile decides the next delivery of a stuck task and, when it is to be delivered again,
// counts it and marks the task moved at now, so that it is not taken for stuck again before
// the threshold passes anew. firstDispatched (zero when unknown) sets FirstDispatchedAt the
// first time. A task that ran since its previous delivery (Ran) is delivered again while
// Reconciliations < max (RedeliverRun), else RedeliveriesSpent; one that did not is
// delivered again while younger than maxAge (RedeliverUnrun), else RedeliveryTooOld: only
// a run spends a try. Nothing but FirstDispatchedAt changes unless the task is delivered
// again. A finished task is ErrTaskFinished.
func (t *Task) Reconcile(max int, maxAge time.Duration, firstDispatched, now time.Time) (Redelivery, error) {
	if t.Status.Terminal() {
		return 0, ErrTaskFinished
	}
	if t.FirstDispatchedAt.IsZero() && !firstDispatched.IsZero() {
		t.FirstDispatchedAt = firstDispatched
	}
	ran := t.Ran()
	if !ran {
		if t.Age(now) >= maxAge {
			return RedeliveryTooOld, nil
		}
		t.Redeliveries++
	} else {
		if t.Reconciliations >= max {
			return RedeliveriesSpent, nil
		}
		t.Reconciliations++
		t.ReconciledAttempts = t.Attempts
	}
	t.UpdatedAt = now
	t.Version++
	if ran {
		return RedeliverRun, nil
	}
	return RedeliverUnrun, nil
}

// What a completed last look found (TaskLook.Found).
const (
	// LookNotDone: the work is not done upstream; the held failure stands.
	LookNotDone = "not_done"
	// LookDone: the work is done upstream; the task succeeds.
	LookDone = "done"
)

// TaskLook is a task's last look: before a final failure, a flow that can asks its upstream
// whether the work was done after all. The failure is held (Code, Message) until a look
// completes (LookedAt, Found); only then is it recorded.
type TaskLook struct {
	// Code and Message are the held failure; Code is empty when no look was asked.
	Code, Message string
	// LookedAt is when a look asked for last completed; zero while none did.
	LookedAt time.Time
	// Found is what it found: LookNotDone or LookDone; empty while none completed.
	Found string
}

// Asked reports whether a last look was asked for.
func (l TaskLook) Asked() bool { return l.Code != "" }

// Pending reports whether a last look was asked for and none completed since.
func (l TaskLook) Pending() bool { return l.Asked() && l.LookedAt.IsZero() }

// AskLook asks for a last look before the final failure (code, message) and marks the task
// moved at now. A look asked for already keeps the failure it holds (the first reason the
// task was to fail) and is asked again: what an earlier look found is forgotten. A finished
// task is ErrTaskFinished.
func (t *Task) AskLook(code, message string, now time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	if !t.Look.Asked() {
		t.Look.Code, t.Look.Message = code, boundText(message, MaxTaskErrorLength)
	}
	t.Look.LookedAt, t.Look.Found = time.Time{}, ""
	t.UpdatedAt = now
	t.Version++
	return nil
}

// Looked records that the last look completed at now and found found (LookNotDone,
// LookDone). A finished task is ErrTaskFinished.
func (t *Task) Looked(found string, now time.Time) error {
	if t.Status.Terminal() {
		return ErrTaskFinished
	}
	t.Look.LookedAt, t.Look.Found = now, found
	t.UpdatedAt = now
	t.Version++
	return nil
}

// LookDecision is what ReconcileLook decided for a stuck task whose last look was asked for.
type LookDecision int

// Decisions of ReconcileLook.
const (
	// LookFail: a look completed and found the work absent: the held failure is recorded.
	LookFail LookDecision = iota + 1
	// LookAgain: no look completed (its job lost, or it failed), or the one that found the
	// work done could not record it: the look is asked again (a redelivery that spends no
	// try, backing off like one: Redeliveries).
	LookAgain
	// LookTooOld: no look completed and the task is older than the age bound: it fails
	// OUTCOME_UNKNOWN.
	LookTooOld
)

// ReconcileLook decides the next step of a stuck task whose last look was asked for
// (Look.Asked); when the look is asked again, it counts the redelivery and marks the task
// moved at now. firstDispatched as for Reconcile. A finished task is ErrTaskFinished.
func (t *Task) ReconcileLook(maxAge time.Duration, firstDispatched, now time.Time) (LookDecision, error) {
	if t.Status.Terminal() {
		return 0, ErrTaskFinished
	}
	if t.FirstDispatchedAt.IsZero() && !firstDispatched.IsZero() {
		t.FirstDispatchedAt = firstDispatched
	}
	switch {
	case t.Look.Found == LookNotDone:
		return LookFail, nil
	case t.Look.Found == "" && t.Age(now) >= maxAge:
		return LookTooOld, nil
	}
	t.Redeliveries++
	t.UpdatedAt = now
	t.Version++
	return LookAgain, nil
}

// Requested is a task that can rebuild the event that asked for it, from its own state. The
// engine sends that event again, under a new id, when the task stopped moving (its job failed
// outside a handler, or was lost with Redis).
type Requested interface {
	// RequestEvent returns the event that requested the task, as the command published it.
	RequestEvent() Event
}
