// Package worker is the engine the job handlers run on: the declaration of a flow (Spec,
// registered in app/worker/flows, which derives the routing of domain events), the job
// envelope every transport carries (Envelope), the Job a handler receives, and the task lifecycle every flow uses (Flow: begin, call, record, with one
// error policy), plus what the engine does with a task outside any handler (TaskKind:
// abandon, reconcile).
//
// Re-entrancy contract (docs/guarantees.md, 6): a job may be delivered more than once, at
// any point of its previous delivery — before the external call, after it but before the
// result was recorded, or after. Flow makes every flow (1) load the domain task in a
// transaction and stop when it is finished, (2) call outside any transaction, where a flow
// uses a deduplication key derived from the task or looks the result up before creating it,
// (3) record results with compare-and-set transitions, so that a second delivery changes
// nothing twice. BullMQ's "runs once" is never relied on.
//
// Adding a flow: docs/adding-a-flow.md.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Queue names of the flows declared in app/worker/<flow> (each flow's Spec names its queue;
// app/worker/flows lists them): one BullMQ queue per job family (docs/bullmq-wire.md). Stable.
const (
	QueueStoreVerification = "store-verification"
	QueueMediaProcessing   = "media-processing"
	QueueMaterialTransfer  = "material-transfer"
	QueueListingPublish    = "listing-publish"
	QueueProductSync       = "product-sync"
	QueueAITask            = "ai-task"
	QueueListingUpdate     = "listing-update"
	// StreamEvents is the destination of every integration event (domain.RegisterIntegrationEvent):
	// the Redis stream <STREAM_PREFIX>:events (docs/events.md), as CloudEvents.
	StreamEvents = "events"
)

// Job is one delivery of a domain event to a handler.
type Job struct {
	// ID is the outbox event id (the BullMQ jobId): stable across redeliveries.
	ID          string
	WorkspaceID uuid.UUID
	EventType   string
	Payload     json.RawMessage
	// Attempt counts deliveries, from 1. LastAttempt is true when no retry will follow a
	// retryable failure: the handler must then record a final failure.
	Attempt     int
	LastAttempt bool
	// Snoozes counts the earlier deliveries that were snoozed (see Snooze), and Snoozed their
	// total delay.
	Snoozes int
	Snoozed time.Duration
	// CorrelationID is the id of the request that caused the job, and TraceParent and
	// TraceState its W3C trace context (all may be empty).
	CorrelationID           string
	TraceParent, TraceState string
}

// TraceID is the trace id of the job's traceparent ("00-<trace id>-<span id>-<flags>"), or
// "" without one.
func (j Job) TraceID() string {
	parts := strings.Split(j.TraceParent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// Decode unmarshals the payload into v.
func (j Job) Decode(v any) error {
	if err := json.Unmarshal(j.Payload, v); err != nil {
		return Permanent(fmt.Errorf("job %s (%s): bad payload: %w", j.ID, j.EventType, err))
	}
	return nil
}

// Handler handles the jobs of one queue.
type Handler interface {
	Handle(ctx context.Context, job Job) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, job Job) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job Job) error { return f(ctx, job) }

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks an error that retrying cannot fix: the job fails now.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// Deps are what every handler needs.
type Deps struct {
	Tx         port.Transactor
	Operations port.Repository[domain.Operation]
	Events     port.EventPublisher
	Now        port.Clock
	Log        *slog.Logger
	// Guards checks the declared guards (sql/060_task_guards.sql) in every begin step: a
	// task whose aggregate breaks one is refused with the guard's error before the flow's
	// Begin. Nil: no guards are checked (tests of one flow).
	Guards port.TaskGuards
}

// Step runs fn in one RLS transaction of the job's workspace. Workers never hold a
// transaction open across an external call: every call sits between two steps.
func (d Deps) Step(ctx context.Context, job Job, fn func(ctx context.Context) error) error {
	return d.Tx.InTx(ctx, job.WorkspaceID, uuid.Nil, fn)
}

// groupStep runs fn as Step does, in a transaction that it may share with the steps of
// other jobs running at the same time (group commit, port.GroupTransactor), each under its
// own workspace's scope. fn may run twice (the shared transaction failed: fn runs again
// alone), so it sets what it hands out on every run. errFinished from fn (the task found
// finished, nothing written) is a success for the group and ErrSkip for the caller.
//
// key is the task the step locks and changes: two steps of one task never share a
// transaction (its row lock would not keep them apart there).
func (d Deps) groupStep(ctx context.Context, job Job, key uuid.UUID, fn func(ctx context.Context) error) error {
	g, ok := d.Tx.(port.GroupTransactor)
	if !ok {
		return d.Step(ctx, job, fn)
	}
	skipped := false
	err := g.InGroupTx(ctx, job.WorkspaceID, key, func(ctx context.Context) error {
		skipped = false
		err := fn(ctx)
		if errors.Is(err, errFinished) {
			skipped = true
			return nil
		}
		return err
	})
	if err == nil && skipped {
		return errFinished
	}
	return err
}

// preloadLocking marks ctx, given to groupStep, with the locking read of task id and its
// operation, when tasks can send it ahead of the group's steps (port.LockPreloader).
func preloadLocking[T any](ctx context.Context, tasks port.Repository[T], id uuid.UUID) context.Context {
	if p, ok := tasks.(port.LockPreloader); ok {
		return p.PreloadLocking(ctx, id)
	}
	return ctx
}

// updateAtCommit is repo's Update with its write sent with the COMMIT, when repo can
// (port.UpdaterAtCommit): for the last write of a row in a step, which nothing in the step
// reads or writes again.
func updateAtCommit[T any](ctx context.Context, repo port.Repository[T], id uuid.UUID, fn func(*T) error) (T, error) {
	if u, ok := repo.(port.UpdaterAtCommit[T]); ok {
		return u.UpdateAtCommit(ctx, id, fn)
	}
	return repo.Update(ctx, id, fn)
}

// updateWith is repo's Update, or updateAtCommit on repo when atCommit.
func updateWith[T any](repo port.Repository[T], atCommit bool) func(context.Context, uuid.UUID, func(*T) error) (T, error) {
	if !atCommit {
		return repo.Update
	}
	return func(ctx context.Context, id uuid.UUID, fn func(*T) error) (T, error) {
		return updateAtCommit(ctx, repo, id, fn)
	}
}

// errBusy ends a begin step whose Begin answered busy (an error with a Retry-After) before
// anything was written: the step writes nothing and fails no other step of its group.
var errBusy = errors.New("worker: busy")

// errHeld ends a begin step that found a held result (domain.Task.HeldResult) before writing
// anything: the delivery records it instead of calling.
var errHeld = errors.New("worker: result held")

// errFenced ends a begin step that found its task's call fenced (domain.Task.Fenced) before
// writing anything: the delivery waits for the fence.
var errFenced = errors.New("worker: call fenced")

// errRefused ends a begin step whose task a guard refused before writing anything: the step
// then writes the task's failure itself.
var errRefused = errors.New("worker: refused by a guard")

// errFinished is ErrSkip returned by a step that found its task finished before writing
// anything: in a group transaction it fails no other step.
var errFinished = fmt.Errorf("%w (nothing written)", ErrSkip)

// StartOperation moves the operation to running (once). It publishes nothing: the
// operation's finish carries when it started (domain.Operation.Finished), which saves every
// job an outbox row and its dispatch. It must run inside a Step.
func (d Deps) StartOperation(ctx context.Context, id uuid.UUID) error {
	_, err := updateAtCommit(ctx, d.Operations, id, func(o *domain.Operation) error {
		_, err := o.Start(d.Now())
		if errors.Is(err, domain.ErrOperationFinished) {
			return nil
		}
		return err
	})
	return err
}

// SucceedOperation finishes the operation with result (marshaled to JSON) and publishes
// the change; a finished operation is left alone. It must run inside a Step.
func (d Deps) SucceedOperation(ctx context.Context, id uuid.UUID, result any) error {
	raw, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("worker.SucceedOperation: %w", err)
	}
	return d.finishOperation(ctx, id, true, func(o *domain.Operation) error { return o.Succeed(raw, d.Now()) })
}

// FailOperation finishes the operation with a client-safe code and message and publishes
// the change; a finished operation is left alone. It must run inside a Step.
func (d Deps) FailOperation(ctx context.Context, id uuid.UUID, code, message string) error {
	return d.finishOperation(ctx, id, false, func(o *domain.Operation) error { return o.Fail(code, message, d.Now()) })
}

// finishOperation finishes the operation with fn and publishes the finish, with when the
// operation started running (domain.Operation.Finished); atCommit sends its write with the
// COMMIT (updateAtCommit: the step reads and writes the operation no more).
func (d Deps) finishOperation(ctx context.Context, id uuid.UUID, atCommit bool, fn func(*domain.Operation) error) error {
	changed := false
	var before domain.Operation
	op, err := updateWith(d.Operations, atCommit)(ctx, id, func(o *domain.Operation) error {
		if o.Status.Terminal() {
			return nil
		}
		changed, before = true, *o
		return fn(o)
	})
	if err != nil || !changed {
		return err
	}
	return d.Events.Publish(ctx, op.Finished(before))
}

// Failure is the client-safe description of why a task failed: a stable code and a fixed
// message. External errors are mapped to one; their text is never shown to clients.
type Failure struct {
	Code    string
	Message string
}

// FailureOf maps an error to a client-safe Failure: a *domain.Error keeps its code and
// message; anything else is INTERNAL with a generic message.
func FailureOf(err error) Failure {
	var de *domain.Error
	if errors.As(err, &de) && de.Kind != domain.KindInternal {
		return Failure{Code: de.Code, Message: de.Message}
	}
	if errors.As(err, &de) {
		return Failure{Code: de.Code, Message: "the task failed"}
	}
	return Failure{Code: domain.ErrInternal.Code, Message: "the task failed; it will not be retried"}
}

// ErrSkip is returned inside a Step to say "nothing to do: the task is finished" and roll
// the step back; handlers turn it into success.
var ErrSkip = errors.New("worker: task already finished")

// FailTask records a final failure (re-entrancy rule 3: compare-and-set): it loads the task
// id through tasks under a row lock and, unless the task is finished, fails it with f and
// then fails its operation (worker.FailOperation, with the change published). task returns
// the domain.Task that T embeds; the failed task is returned, so that the caller can record
// what else the failure changes (a rejected media, a ledger row) in the same Step.
//
// It must run inside a Step. On a finished task it changes nothing and returns ErrSkip (the
// failure was recorded before, or another delivery finished the task): return it from the
// Step and do not report the failure again. Any other error (e.g. the task's not-found
// domain error) is returned as is, with nothing written.
func FailTask[T any](ctx context.Context, d Deps, tasks port.Repository[T], id uuid.UUID, task func(*T) *domain.Task, f Failure) (T, error) {
	return failTask(ctx, d, tasks, id, task, f, nil)
}

// failTask is FailTask that, when before is set, applies before to the unfinished task first,
// in the same write.
func failTask[T any](ctx context.Context, d Deps, tasks port.Repository[T], id uuid.UUID, task func(*T) *domain.Task, f Failure, before func(*domain.Task) error) (T, error) {
	// The operation is locked and read with the task (one round trip), for FailOperation.
	v, err := tasks.Update(port.LockingOperation(ctx), id, func(v *T) error {
		t := task(v)
		if t.Status.Terminal() {
			return ErrSkip
		}
		if before != nil {
			if err := before(t); err != nil {
				return err
			}
		}
		return t.Fail(f.Code, f.Message, d.Now())
	})
	if err != nil {
		return v, err
	}
	return v, d.FailOperation(ctx, task(&v).OperationID, f.Code, f.Message)
}
