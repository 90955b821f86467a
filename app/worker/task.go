package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
	// Reconcile handles task s, found stuck: it must run inside a transaction of the task's
	// workspace. A task whose handler has not started since its previous delivery is
	// delivered again for free while younger than p.MaxAge (RedeliveredUnrun), then fails
	// DELIVERY_EXHAUSTED; one that ran is delivered again while below p.Max reconciliations
	// (Redelivered), then fails DELIVERY_EXHAUSTED. For a flow that asks a last look, that
	// failure waits for a completed look (LastLooked; OutcomeUnknown when none completes
	// before p.MaxAge). A delivery publishes the task's request event again (a new outbox
	// event, so a new job id). A finished task is left alone (Unchanged).
	Reconcile(ctx context.Context, s port.StuckTask, p RedeliveryPolicy) (Reconciled, error)
}

// RedeliveryPolicy bounds the deliveries of a stuck task (TaskKind.Reconcile).
type RedeliveryPolicy struct {
	// Max is how often a task that ran is delivered again before it fails (RECONCILE_MAX).
	Max int
	// MaxAge is how long, from its first dispatch, a task whose handler did not start is
	// delivered again before it fails (TASK_MAX_AGE).
	MaxAge time.Duration
}

// Reconciled is what Reconcile did.
type Reconciled string

// Outcomes of Reconcile.
const (
	Redelivered Reconciled = "redelivered"
	// RedeliveredUnrun: delivered again, for free, a task whose handler had not started since
	// its previous delivery (its job lost before a worker took it).
	RedeliveredUnrun Reconciled = "redelivered_unrun"
	Exhausted        Reconciled = "exhausted"
	Unchanged        Reconciled = "unchanged"
	// LastLooked: a last look was asked before a final failure (at max, or too old after a
	// run), or asked again (no look completed since it was asked).
	LastLooked Reconciled = "last_look"
	// OutcomeUnknown: no last look completed before the task was MaxAge old; it failed
	// OUTCOME_UNKNOWN.
	OutcomeUnknown Reconciled = "outcome_unknown"
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
	// AsksLastLook says the flow takes a last look before a final failure (Flow.LastLook;
	// Spec.LastLook.Asks): Abandon and Reconcile then request it (RequestLastLook) instead of
	// failing the task blind.
	AsksLastLook bool
	// Accept, for a flow whose entry point the engine derives (Spec.Start), builds the task a
	// command starts, in the command's transaction, after checking what must hold (reading
	// and locking through its repositories; a domain error refuses the command). The engine
	// inserts the task with its operation and events (Starts). Nil otherwise.
	Accept func(ctx context.Context, a Acceptance) (T, error)
}

var _ TaskKind = Kind[domain.Publication]{}

// Queue implements TaskKind.
func (k Kind[T]) Queue() string { return k.QueueName }

// Abandon implements TaskKind. A flow that asks a last look requests it instead of failing
// the task. When job is that last look already, the failure it held is recorded only if a
// look completed and found the work absent; otherwise nothing changes and the reconciler
// asks the look again (no final failure without a completed look). A task whose handler
// never started (no attempt) is left alone: nothing reached the upstream, so, as when its job
// is lost, the reconciler delivers it again for free until TASK_MAX_AGE.
func (k Kind[T]) Abandon(ctx context.Context, job Job, f Failure) error {
	id, err := k.TaskID(job)
	if err != nil {
		return fmt.Errorf("worker.Abandon %s: %w", k.QueueName, err)
	}
	_, looked := LastLookOf(job)
	err = k.Deps.Step(ctx, job, func(ctx context.Context) error {
		switch {
		case looked && k.AsksLastLook:
			v, err := k.Tasks.Get(ctx, id)
			if err != nil {
				return err
			}
			l := k.TaskOf(&v).Look
			if l.Found != domain.LookNotDone {
				return ErrSkip // no completed look says the work is absent: asked again
			}
			return k.Fail(ctx, id, Failure{Code: l.Code, Message: l.Message})
		}
		if v, err := k.Tasks.Get(ctx, id); err == nil && k.TaskOf(&v).Attempts == 0 {
			return ErrSkip // never started: delivered again by the reconciler, for free
		}
		if k.AsksLastLook {
			return k.RequestLastLook(ctx, id, f)
		}
		return k.Fail(ctx, id, f)
	})
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

// RequestLastLook asks for the last look of task id before the final failure f: unless the
// task is finished, it records the look asked for on the task (domain.Task.AskLook: a look
// asked for already keeps the failure it holds) and publishes a domain.LastLookRequested
// with the held failure (a delivery of its own, through the outbox: the look runs in a
// worker, outside any transaction). It must run inside a Step; on a finished task it changes
// nothing and returns ErrSkip.
func (k Kind[T]) RequestLastLook(ctx context.Context, id uuid.UUID, f Failure) error {
	t, err := k.Tasks.Update(ctx, id, func(v *T) error {
		if errors.Is(k.TaskOf(v).AskLook(f.Code, f.Message, k.Deps.Now()), domain.ErrTaskFinished) {
			return ErrSkip
		}
		return nil
	})
	if err != nil {
		return err
	}
	return k.publishLook(ctx, t)
}

// publishLook publishes the last look of t, with the failure t's look holds.
func (k Kind[T]) publishLook(ctx context.Context, t T) error {
	l := k.TaskOf(&t).Look
	return k.Deps.Events.Publish(ctx, domain.LastLookRequested{Request: t.RequestEvent(), Code: l.Code, Message: l.Message})
}

// lastLookKey is the last look field as a JSON key.
var lastLookKey = []byte(`"` + domain.LastLookField + `"`)

// LastLookOf reports whether job is a last look (domain.LastLookRequested), and the failure
// it holds.
func LastLookOf(job Job) (Failure, bool) {
	// Most payloads have no last look: without a backslash (an escaped key) the key's
	// bytes appear in the payload if the field does.
	if bytes.IndexByte(job.Payload, '\\') < 0 && !bytes.Contains(job.Payload, lastLookKey) {
		return Failure{}, false
	}
	var ev map[string]json.RawMessage
	if json.Unmarshal(job.Payload, &ev) != nil || ev[domain.LastLookField] == nil {
		return Failure{}, false
	}
	var l domain.LastLook
	if json.Unmarshal(ev[domain.LastLookField], &l) != nil || l.Code == "" {
		return Failure{}, false
	}
	return Failure{Code: l.Code, Message: l.Message}, true
}

// Reconcile implements TaskKind. For a flow that asks a last look, no final failure is
// recorded without a completed look: where the task would fail DELIVERY_EXHAUSTED after it
// ran, a last look is asked instead (RequestLastLook); a task found stuck with its look asked
// for fails with the failure the look holds once a look completed and found the work absent,
// is asked the look again (a redelivery that spends no try: its job was lost, the look failed,
// or its success could not be recorded) while younger than p.MaxAge, and then fails
// OUTCOME_UNKNOWN. A task whose handler never ran fails DELIVERY_EXHAUSTED when too old
// without a look: the upstream never saw it.
func (k Kind[T]) Reconcile(ctx context.Context, s port.StuckTask, p RedeliveryPolicy) (Reconciled, error) {
	d := k.Deps
	var decision domain.Redelivery
	var look domain.LookDecision
	asked := false
	t, err := k.Tasks.Update(ctx, s.ID, func(v *T) error {
		task := k.TaskOf(v)
		if task.Status.Terminal() {
			return ErrSkip
		}
		var err error
		if k.AsksLastLook && task.Look.Asked() {
			look, err = task.ReconcileLook(p.MaxAge, s.FirstDispatchedAt, d.Now())
			return err
		}
		decision, err = task.Reconcile(p.Max, p.MaxAge, s.FirstDispatchedAt, d.Now())
		if err == nil && k.AsksLastLook && (decision == domain.RedeliveriesSpent ||
			(decision == domain.RedeliveryTooOld && task.Attempts > 0)) {
			asked = true
			f := FailureOf(domain.ErrDeliveryExhausted)
			return task.AskLook(f.Code, f.Message, d.Now())
		}
		return err
	})
	switch {
	case errors.Is(err, ErrSkip):
		return Unchanged, nil
	case err != nil:
		return "", fmt.Errorf("worker.Reconcile %s: %w", k.QueueName, err)
	}
	task := k.TaskOf(&t)
	fail := FailureOf(domain.ErrDeliveryExhausted)
	switch {
	case asked || look == domain.LookAgain:
		if err := k.publishLook(ctx, t); err != nil {
			return "", fmt.Errorf("worker.Reconcile %s: %w", k.QueueName, err)
		}
		return LastLooked, nil
	case look == domain.LookFail:
		fail = Failure{Code: task.Look.Code, Message: task.Look.Message}
	case look == domain.LookTooOld:
		fail = FailureOf(domain.ErrOutcomeUnknown)
	case decision == domain.RedeliverRun || decision == domain.RedeliverUnrun:
		if err := d.Events.Publish(ctx, t.RequestEvent()); err != nil {
			return "", fmt.Errorf("worker.Reconcile %s: %w", k.QueueName, err)
		}
		if decision == domain.RedeliverUnrun {
			return RedeliveredUnrun, nil
		}
		return Redelivered, nil
	}
	if err := k.Fail(ctx, s.ID, fail); err != nil && !errors.Is(err, ErrSkip) {
		return "", fmt.Errorf("worker.Reconcile %s: %w", k.QueueName, err)
	}
	if look == domain.LookTooOld {
		return OutcomeUnknown, nil
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
