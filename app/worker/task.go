package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// TaskKind is what the engine knows of one queue's domain task without running its flow:
// which task a job is about, how to record a final failure on it, and how to ask for it
// again. It lets every way a job ends reach the task — a job failed outside any handler
// (Abandon), a job lost or removed (Reconcile) — since only the task knows whether the work
// is done. Implementations are safe for concurrent use.
type TaskKind interface {
	// Queue is the queue whose jobs carry this task's request event.
	Queue() string
	// Abandon records a final failure f on the task job is about, in a transaction of its
	// own, unless the task is finished (then it changes nothing and returns nil).
	Abandon(ctx context.Context, job Job, f Failure) error
	// Reconcile handles task id, found stuck: it must run inside a transaction of the task's
	// workspace. Below max reconciliations it counts one more and publishes the task's
	// request event again (a new outbox event, so a new job id); at max it fails the task and
	// its operation with DELIVERY_EXHAUSTED. A finished task is left alone (Unchanged).
	Reconcile(ctx context.Context, id uuid.UUID, max int) (Reconciled, error)
}

// Reconciled is what Reconcile did.
type Reconciled string

// Outcomes of Reconcile.
const (
	Redelivered Reconciled = "redelivered"
	Exhausted   Reconciled = "exhausted"
	Unchanged   Reconciled = "unchanged"
)

// Kind implements TaskKind for tasks of type T (a domain task such as domain.Publication)
// stored in Tasks. Every field but OnFail is required.
type Kind[T domain.Requested] struct {
	// QueueName is the queue of the task's jobs.
	QueueName string
	// Deps gives transactions, operations, the outbox publisher and the clock.
	Deps Deps
	// Tasks stores the tasks.
	Tasks port.Repository[T]
	// TaskOf returns the domain.Task that T embeds.
	TaskOf func(*T) *domain.Task
	// TaskID reads the task's id from a job of the queue (its request event).
	TaskID func(Job) (uuid.UUID, error)
	// OnFail, when set, records what else a final failure of the task changes (a rejected
	// media), in the same transaction, after the task and its operation failed.
	OnFail func(ctx context.Context, task T, f Failure) error
}

var _ TaskKind = Kind[domain.Publication]{}

// Queue implements TaskKind.
func (k Kind[T]) Queue() string { return k.QueueName }

// Abandon implements TaskKind.
func (k Kind[T]) Abandon(ctx context.Context, job Job, f Failure) error {
	id, err := k.TaskID(job)
	if err != nil {
		return fmt.Errorf("worker.Abandon %s: %w", k.QueueName, err)
	}
	err = k.Deps.Step(ctx, job, func(ctx context.Context) error { return k.Fail(ctx, id, f) })
	if errors.Is(err, ErrSkip) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("worker.Abandon %s: %w", k.QueueName, err)
	}
	return nil
}

// Fail records a final failure f on task id, its operation and (OnFail) whatever else the
// flow's failure changes. It must run inside a Step; on a finished task it changes nothing
// and returns ErrSkip (see FailTask).
func (k Kind[T]) Fail(ctx context.Context, id uuid.UUID, f Failure) error {
	t, err := FailTask(ctx, k.Deps, k.Tasks, id, k.TaskOf, f)
	if err != nil || k.OnFail == nil {
		return err
	}
	return k.OnFail(ctx, t, f)
}

// Reconcile implements TaskKind.
func (k Kind[T]) Reconcile(ctx context.Context, id uuid.UUID, max int) (Reconciled, error) {
	d := k.Deps
	again := false
	t, err := k.Tasks.Update(ctx, id, func(v *T) error {
		var err error
		again, err = k.TaskOf(v).Reconcile(max, d.Now())
		if errors.Is(err, domain.ErrTaskFinished) {
			return ErrSkip
		}
		return err
	})
	switch {
	case errors.Is(err, ErrSkip):
		return Unchanged, nil
	case err != nil:
		return "", fmt.Errorf("worker.Reconcile %s: %w", k.QueueName, err)
	case again:
		if err := d.Events.Publish(ctx, t.RequestEvent()); err != nil {
			return "", fmt.Errorf("worker.Reconcile %s: %w", k.QueueName, err)
		}
		return Redelivered, nil
	}
	if err := k.Fail(ctx, id, FailureOf(domain.ErrDeliveryExhausted)); err != nil && !errors.Is(err, ErrSkip) {
		return "", fmt.Errorf("worker.Reconcile %s: %w", k.QueueName, err)
	}
	return Exhausted, nil
}

// PayloadID returns a Kind.TaskID that decodes a job's payload as the request event E and
// picks the task id from it.
func PayloadID[E any](id func(E) uuid.UUID) func(Job) (uuid.UUID, error) {
	return func(j Job) (uuid.UUID, error) {
		var ev E
		if err := j.Decode(&ev); err != nil {
			return uuid.Nil, err
		}
		if id(ev) == uuid.Nil {
			return uuid.Nil, Permanent(fmt.Errorf("job %s (%s): no task id in the payload", j.ID, j.EventType))
		}
		return id(ev), nil
	}
}
