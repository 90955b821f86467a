package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Flow is one queue's work, stated as domain steps; the engine (Flow.Handle) runs them for
// every job of the queue, the same way for every flow:
//
//  1. decode the job's request event and read the task id (Kind.TaskID);
//  2. begin, in a transaction of the job's workspace: load the task under its row lock and
//     stop (success, nothing done) if it is finished; Begin gathers what the call needs and
//     may refuse the task; then the task and its operation start (compare-and-set);
//  3. Call, outside any transaction (external systems, storage), with a deduplication key
//     derived from the task, under the call fence when the flow has one (CallTimeout: a
//     delivery that finds the task running before another run's call deadline waits);
//  4. record, in a second transaction: the task under its row lock again, and, unless
//     another delivery finished it meanwhile, Record applies the result; the task and its
//     operation succeed.
//
// The begin and record transactions of jobs running at the same time may be one (group
// commit, port.GroupTransactor: each step under its own workspace's scope, keeping its own
// compare-and-set); a step that fails in a group runs again alone, so the closures of steps
// 2 and 4 set what they hand out on every run.
//
// Every error goes through one policy (decide): a finished task is success; an upstream
// Retry-After snoozes the job without spending an attempt (bounded: Snooze); a permanent
// error, or any error on the last attempt, records a final failure on the task and its
// operation (Kind.Fail, or OnFail); anything else is retried by the transport. The engine
// logs one line per attempt.
//
// T is the task, W what Begin hands to Call, R what Call hands to Record.
type Flow[T domain.Requested, W, R any] struct {
	Kind[T]
	// Begin runs in the begin transaction with the task locked and unfinished, before the
	// engine starts it; it may change the task (it is saved). It returns what Call needs, or
	// Refuse(reason) to fail the task at once without a call, or an error (retried). An error
	// with a Retry-After (busy: another holds what the task needs; snoozed), or the error of
	// StoreBudget.Wait (over the store's budget: the job waits, spending neither an attempt
	// nor a snooze, its task still pending), must come before Begin wrote anything: the step
	// ends without a write and, in a group transaction, the other steps commit (a busy task
	// is a routine answer, not the group's failure). Optional.
	Begin func(ctx context.Context, task *T) (W, error)
	// Call does the work, outside any transaction. A long call may record progress in
	// transactions of its own with tx. Required.
	Call func(ctx context.Context, task T, w W, tx Tx) (R, error)
	// Record runs in the record transaction with the task locked and unfinished: it applies
	// r to the task (saved afterwards) and to whatever else the result changes, and returns
	// the operation's result (JSON). Required.
	Record func(ctx context.Context, task *T, r R) (any, error)
	// Finished, when set, is told that the record step found the task finished by another
	// delivery: r, this delivery's result, was dropped. It runs outside any transaction.
	Finished func(ctx context.Context, task T, r R)
	// OnFail, when set, replaces Kind.OnFail for the final failures of this flow's jobs: it
	// also gets the result Call returned with its error (e.g. the usage a provider billed).
	OnFail func(ctx context.Context, task T, r R, f Failure) error
	// LastLook, when set, is the flow's last look (Kind.AsksLastLook must be set with it):
	// before any final failure of a started task the engine requests it as a delivery of its
	// own (Kind.RequestLastLook); that delivery runs LastLook outside any transaction (it may
	// read what it needs with tx) to ask the upstream whether the work was done after all.
	// done: r is recorded as a success (Record); not done: the held failure is recorded. A
	// look that fails is retried, and on its last attempt the held failure is recorded.
	LastLook func(ctx context.Context, task T, tx Tx) (r R, done bool, err error)
	// Hold and Unhold, when set (both or neither), make Call's result storable: when the
	// record step gives up after a successful call, the engine keeps Hold(r) on the task
	// (domain.Task.HeldResult, in the database, so that neither a retry nor a Redis loss
	// drops it) and the next delivery records Unhold of it without calling again. Without
	// them, a record step that gives up is retried with a new call (under the same
	// deduplication key).
	Hold   func(r R) ([]byte, error)
	Unhold func(held []byte) (R, error)
	// CallTimeout, when positive, fences the call: the begin step records on the task that
	// this run's call ends by its start plus CallTimeout (domain.Task.Fence) and Call runs
	// under that deadline, so that a delivery that finds the task running before it (its
	// worker died, or gave its job up, with the call in flight) waits until it passed,
	// spending no attempt, and one after it proceeds: no call made for the task can land
	// upstream beside the next one. A flow whose call changes something upstream sets it
	// to the longest its call may take (the time-outs of the requests it makes one after
	// another); without it a dead worker's call may still land while the next delivery
	// runs. A call that ends with an error lifts its fence (the next delivery need not
	// wait).
	CallTimeout time.Duration
	// Log receives one line per attempt. Default: Deps.Log, else no logs.
	Log *slog.Logger
}

// Tx runs fn in one transaction of the job's workspace (see Deps.Step).
type Tx func(ctx context.Context, fn func(ctx context.Context) error) error

// Validate reports the first missing field.
func (f Flow[T, W, R]) Validate() error {
	d := f.Deps
	switch {
	case f.QueueName == "":
		return errors.New("worker.Flow: QueueName is required")
	case d.Tx == nil || d.Operations == nil || d.Events == nil || d.Now == nil:
		return fmt.Errorf("worker.Flow %s: Deps.Tx, Operations, Events and Now are required", f.QueueName)
	case f.Tasks == nil || f.TaskOf == nil || f.TaskID == nil:
		return fmt.Errorf("worker.Flow %s: Tasks, TaskOf and TaskID are required", f.QueueName)
	case f.Call == nil || f.Record == nil:
		return fmt.Errorf("worker.Flow %s: Call and Record are required", f.QueueName)
	case (f.LastLook != nil) != f.AsksLastLook:
		return fmt.Errorf("worker.Flow %s: LastLook and Kind.AsksLastLook go together", f.QueueName)
	case (f.Hold != nil) != (f.Unhold != nil):
		return fmt.Errorf("worker.Flow %s: Hold and Unhold go together", f.QueueName)
	}
	return nil
}

// FenceMargin is added to the wait of a delivery that met a fenced call (Flow.CallTimeout):
// the clocks of the processes that run the workers must agree within it.
const FenceMargin = time.Second

// fenceWait is a delivery that found its task running before the call deadline of another
// run (domain.Task.Fenced): it waits delay and runs again (decide turns it into a
// SnoozeError with Wait set: no attempt, no snooze spent).
type fenceWait struct{ delay time.Duration }

func (e fenceWait) Error() string {
	return "the task's call may still be in flight (its worker stopped): waiting " + e.delay.String()
}

// Snooze bounds: a job is snoozed at most MaxSnoozes times, and at most MaxSnooze in total;
// beyond, an upstream Retry-After is an ordinary retryable error (it spends an attempt), so
// that a gateway that always answers 429 cannot keep a task running for ever.
const (
	MaxSnoozes = 10
	MaxSnooze  = 30 * time.Minute
)

// SnoozeError asks the transport to deliver the job again after Delay without counting an
// attempt (River's JobSnooze). With Wait set (a wait for a budget of this service's own, a
// store's rate limit) it is not counted as a snooze either (Job.Snoozes, Job.Snoozed).
// Returned by Flow.Handle only.
type SnoozeError struct {
	Delay time.Duration
	Err   error
	Wait  bool
}

func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %s: %v", e.Delay, e.Err) }
func (e *SnoozeError) Unwrap() error { return e.Err }

// IsWait reports whether err is a SnoozeError with Wait set.
func IsWait(err error) bool {
	var s *SnoozeError
	return errors.As(err, &s) && s.Wait
}

// SnoozeOf returns how long err asks to snooze the job, and whether it does.
func SnoozeOf(err error) (time.Duration, bool) {
	var s *SnoozeError
	if errors.As(err, &s) {
		return s.Delay, true
	}
	return 0, false
}

type refusal struct{ reason *domain.Error }

func (r refusal) Error() string { return "refused: " + r.reason.Error() }
func (r refusal) Unwrap() error { return r.reason }

// Refuse is returned by Flow.Begin to fail the task at once with reason (a client-safe code
// and message), without calling anything.
func Refuse(reason *domain.Error) error { return refusal{reason} }

// Outcomes of one attempt, as logged.
const (
	OutcomeSucceeded = "succeeded" // the task succeeded
	OutcomeSkipped   = "skipped"   // the task was finished already: nothing done
	OutcomeRetry     = "retry"     // retryable failure; the transport delivers again
	OutcomeSnoozed   = "snoozed"   // upstream Retry-After; delivered again, no attempt spent
	OutcomeWaiting   = "waiting"   // over its store's budget, or its call fenced: not started; delivered again, nothing spent
	OutcomeFailed    = "failed"    // final failure, recorded on the task and its operation
	OutcomeLost      = "error"     // final failure that could not be recorded (the reconciler will)
	OutcomeLastLook  = "last_look" // final failure held: a last look was requested first
	OutcomeHeld      = "held"      // the record step gave up; the call's result is held on the task
)

// Handle implements Handler: it runs one delivery of a job through the lifecycle and
// returns nil (done), a *SnoozeError, a Permanent error (failed for good) or another error
// (retry).
func (f Flow[T, W, R]) Handle(ctx context.Context, job Job) error {
	start := time.Now()
	log := f.Log
	if log == nil {
		log = f.Deps.Log
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The line below is logged at Info, Warn or Error: a handler that takes none of them
	// (slog.DiscardHandler) costs no attributes.
	logging := log.Enabled(ctx, slog.LevelError)
	if logging {
		log = log.With(slog.String("queue", f.QueueName), slog.String("job_id", job.ID),
			slog.String("event_type", job.EventType), slog.String("workspace_id", job.WorkspaceID.String()),
			slog.Int("attempt", job.Attempt))
		if job.CorrelationID != "" {
			log = log.With(slog.String("correlation_id", job.CorrelationID))
		}
		if id := job.TraceID(); id != "" {
			log = log.With(slog.String("trace_id", id))
		}
	}

	var r R
	var outcome string
	id, err := f.TaskID(job)
	held, looking := LastLookOf(job)
	switch {
	case err == nil && looking && f.LastLook != nil:
		if logging {
			log = log.With(slog.String("task_id", id.String()), slog.Bool("last_look", true))
		}
		outcome, err = f.look(ctx, job, id, held)
	default:
		if err == nil {
			if logging {
				log = log.With(slog.String("task_id", id.String()))
			}
			r, err = f.run(ctx, job, id)
		}
		outcome, err = f.decide(ctx, job, id, r, err)
	}
	if !logging {
		return err
	}
	attrs := []any{slog.String("outcome", outcome), slog.Duration("duration", time.Since(start))}
	level := slog.LevelInfo
	switch outcome {
	case OutcomeRetry, OutcomeSnoozed, OutcomeHeld:
		level = slog.LevelWarn
		attrs = append(attrs, slog.Bool("retry", true), slog.String("error", err.Error()))
	case OutcomeLastLook:
		level = slog.LevelWarn
		attrs = append(attrs, slog.Bool("retry", false), slog.String("code", FailureOf(err).Code), slog.String("error", err.Error()))
	case OutcomeFailed, OutcomeLost:
		level = slog.LevelError
		attrs = append(attrs, slog.Bool("retry", false), slog.String("code", FailureOf(err).Code), slog.String("error", err.Error()))
	}
	if d, ok := SnoozeOf(err); ok {
		attrs = append(attrs, slog.Duration("delay", d))
	}
	log.Log(ctx, level, "job", attrs...)
	return err
}

// guard checks the declared guards of task id (Deps.Guards): a guard that does not hold
// is a refusal with its error.
func (f Flow[T, W, R]) guard(ctx context.Context, id uuid.UUID) error {
	if f.Deps.Guards == nil {
		return nil
	}
	err := f.Deps.Guards.Check(ctx, f.QueueName, id)
	var de *domain.Error
	if errors.As(err, &de) {
		if g, ok := domain.GuardErrorOf(de.Code); ok {
			return Refuse(g)
		}
	}
	return err
}

// run is steps 2-4. Its error is ErrSkip when the task is finished.
func (f Flow[T, W, R]) run(ctx context.Context, job Job, id uuid.UUID) (R, error) {
	var r R
	d := f.Deps
	tx := Tx(func(ctx context.Context, fn func(ctx context.Context) error) error { return d.Step(ctx, job, fn) })

	var task T
	var w W
	var refused *domain.Error
	var busy error
	var held []byte
	var fenced time.Duration
	var deadline time.Time
	// The task's locking read (with its operation) may be sent ahead with the group's others,
	// and check the task's guards (port.CheckingGuards) in the same statement.
	gctx := ctx
	if d.Guards != nil {
		gctx = port.CheckingGuards(ctx)
	}
	err := d.groupStep(preloadLocking(gctx, f.Tasks, id), job, id, func(ctx context.Context) error {
		// Set on every run: a group commit may run this again alone.
		var zero W
		w, refused, busy, held, fenced, deadline = zero, nil, nil, nil, 0, time.Time{}
		// The task's write goes with the COMMIT unless Begin may refuse it: a refusal's
		// OnFail may read the task again. A guard's refusal writes nothing here (errRefused):
		// the task's failure is written below, before OnFail.
		// The operation is locked and read with the task (one round trip), for StartOperation.
		v, err := updateWith(f.Tasks, f.Begin == nil)(port.LockingOperation(ctx), id, func(v *T) error {
			t := f.TaskOf(v)
			if t.Status.Terminal() {
				return errFinished
			}
			if f.Unhold != nil && len(t.HeldResult) > 0 {
				held = t.HeldResult
				return errHeld
			}
			if wait, ok := t.Fenced(d.Now()); ok {
				fenced = wait
				return errFenced
			}
			if err := f.guard(ctx, id); err != nil {
				var ref refusal
				if errors.As(err, &ref) {
					refused = ref.reason
					return errRefused
				}
				return err
			}
			if f.Begin != nil {
				var err error
				w, err = f.Begin(ctx, v)
				var ref refusal
				if errors.As(err, &ref) {
					refused = ref.reason
					return t.Fail(ref.reason.Code, ref.reason.Message, d.Now())
				}
				if _, ok := retryAfter(err); (ok && !permanent(err)) || isBudgetWait(err) {
					busy = err
					return errBusy
				}
				if err != nil {
					return err
				}
			}
			now := d.Now()
			if err := t.Start(now); err != nil || f.CallTimeout <= 0 {
				return err
			}
			// Microseconds: the deadline is compared with what the database kept (Unfence).
			deadline = now.Add(f.CallTimeout).Truncate(time.Microsecond)
			return t.Fence(deadline)
		})
		if (busy != nil && errors.Is(err, errBusy)) || (held != nil && errors.Is(err, errHeld)) ||
			(fenced > 0 && errors.Is(err, errFenced)) {
			return nil // nothing written: the group's other steps commit
		}
		if refused != nil && errors.Is(err, errRefused) {
			v, err = f.Tasks.Update(ctx, id, func(v *T) error {
				return f.TaskOf(v).Fail(refused.Code, refused.Message, d.Now())
			})
		}
		if err != nil {
			return err
		}
		task = v
		if refused != nil {
			if err := d.FailOperation(ctx, f.TaskOf(&v).OperationID, refused.Code, refused.Message); err != nil {
				return err
			}
			return f.failed(ctx, v, r, FailureOf(refused))
		}
		return d.StartOperation(ctx, f.TaskOf(&v).OperationID)
	})
	switch {
	case err != nil:
		return r, err
	case refused != nil:
		return r, refusal{refused}
	case busy != nil:
		return r, busy
	case fenced > 0:
		return r, fenceWait{fenced}
	case held != nil:
		// A previous delivery's call succeeded and its record step gave up: record its
		// result, without calling again.
		if r, err = f.Unhold(held); err != nil {
			return r, Permanent(fmt.Errorf("worker: the held result of task %s: %w", id, err))
		}
		return r, f.holdOnFailure(ctx, job, id, r, f.record(ctx, job, id, r))
	}

	cctx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		cctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	r, err = f.Call(cctx, task, w, tx)
	if err != nil {
		if !deadline.IsZero() && ctx.Err() == nil {
			// The call ended: the next delivery need not wait for its deadline. Cut short by
			// the job's end (a shutdown, a lost lock), it may still land: the fence stays.
			f.unfence(ctx, job, id, deadline)
		}
		return r, err
	}

	return r, f.holdOnFailure(ctx, job, id, r, f.record(ctx, job, id, r))
}

// unfence lifts task id's fence of the call that was to end by deadline (domain.Task.Unfence),
// in a transaction of its own bounded by HoldTimeout; best effort (without it the next
// delivery waits for the deadline).
func (f Flow[T, W, R]) unfence(ctx context.Context, job Job, id uuid.UUID, deadline time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HoldTimeout)
	defer cancel()
	_ = f.Deps.Step(ctx, job, func(ctx context.Context) error {
		_, err := f.Tasks.Update(ctx, id, func(v *T) error {
			if !f.TaskOf(v).Unfence(deadline, f.Deps.Now()) {
				return ErrSkip // nothing to write
			}
			return nil
		})
		return err
	})
}

// canSnooze reports whether job may be snoozed for delay more: it has snoozes left and the
// delay keeps its total snoozed time within MaxSnooze.
func canSnooze(job Job, delay time.Duration) bool {
	return job.Snoozes < MaxSnoozes && job.Snoozed+delay <= MaxSnooze
}

// HeldRetry is how long a job whose record step gave up on its last attempt waits before
// the delivery that records its held result (decide: a snooze, not an attempt).
const HeldRetry = 2 * time.Second

// HoldTimeout bounds the transaction that holds a result (Flow.Hold) once the record step
// gave up; it runs even when the job's context ended (a shutdown, a lost lock).
const HoldTimeout = 2 * time.Second

// heldError is a record step that gave up after a successful call whose result is held on
// the task (Flow.Hold): the next delivery records it.
type heldError struct{ err error }

func (e heldError) Error() string { return e.err.Error() + " (result held on the task)" }
func (e heldError) Unwrap() error { return e.err }

// IsHeld reports whether err ended a delivery whose record step gave up after a successful
// call, the call's result held on the task (Flow.Hold): the next delivery records it
// without calling again. On the last attempt such an error is a *SnoozeError (HeldRetry)
// while the job has snoozes left, then Permanent (no failure is recorded over the call: the
// reconciler delivers the task again).
func IsHeld(err error) bool {
	var h heldError
	return errors.As(err, &h)
}

// holdOnFailure keeps r on task id when the record step failed with err in a way a later
// delivery may mend (not a finished task, not a refused result), for a flow that can hold
// its results; it returns err, marked as held (heldError) when r was kept.
func (f Flow[T, W, R]) holdOnFailure(ctx context.Context, job Job, id uuid.UUID, r R, err error) error {
	if err == nil || f.Hold == nil || !recordRetryable(err) {
		return err
	}
	b, herr := f.Hold(r)
	if herr == nil {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HoldTimeout)
		defer cancel()
		herr = f.Deps.Step(hctx, job, func(ctx context.Context) error {
			_, err := f.Tasks.Update(ctx, id, func(v *T) error {
				if errors.Is(f.TaskOf(v).Hold(b, f.Deps.Now()), domain.ErrTaskFinished) {
					return ErrSkip
				}
				return nil
			})
			return err
		})
	}
	switch {
	case errors.Is(herr, ErrSkip):
		return herr // finished by another delivery meanwhile
	case herr != nil:
		return fmt.Errorf("%w; holding the result: %v", err, herr)
	}
	return heldError{err}
}

// Record-step retries: a record transaction that fails after a successful call is tried
// again RecordRetries times, waiting RecordBackoff, then twice as long each time, with the
// result held; the call is not made again for it. RecordRetryBudget bounds the whole step
// (the waits and the transactions, a row lock or a stalled database included): record gives
// up once it is spent, for the stop bound (WORKER_STOP_TIMEOUT).
const (
	RecordRetries     = 4
	RecordBackoff     = 250 * time.Millisecond
	RecordRetryBudget = 10 * time.Second
)

// record is step 4 with its retries: the record transaction, tried again (bounded, with
// backoff) while it fails with a retryable error and ctx lives. A finished task (ErrSkip),
// a permanent or domain error ends it at once. It returns within RecordRetryBudget: its
// transactions run under a deadline that leaves, of the budget, the longest a try that is
// in a group transaction at the deadline may still take (port.GroupTimeout).
func (f Flow[T, W, R]) record(ctx context.Context, job Job, id uuid.UUID, r R) error {
	ctx, cancel := context.WithTimeout(ctx, RecordRetryBudget-port.GroupTimeout)
	defer cancel()
	wait := RecordBackoff
	for try := 0; ; try++ {
		err := f.recordOnce(ctx, job, id, r)
		if err == nil || try == RecordRetries || !recordRetryable(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		wait *= 2
	}
}

// recordRetryable reports whether a failed record transaction may succeed when tried
// again: not when the task is finished, the result was refused (a permanent or domain
// error), or the task is gone.
func recordRetryable(err error) bool {
	var de *domain.Error
	return !errors.Is(err, ErrSkip) && !permanent(err) && !(errors.As(err, &de) && de.Kind != domain.KindInternal &&
		de.Kind != domain.KindUnavailable)
}

// recordOnce is one record transaction: the task under its row lock, unless finished, gets
// r (Record) and succeeds with its operation (compare-and-set).
func (f Flow[T, W, R]) recordOnce(ctx context.Context, job Job, id uuid.UUID, r R) error {
	d := f.Deps
	var finished *T
	err := d.groupStep(preloadLocking(ctx, f.Tasks, id), job, id, func(ctx context.Context) error {
		finished = nil // set on every run: a group commit may run this again alone
		var result any
		// The task's write goes with the COMMIT: after Record nothing reads it again.
		// The operation is locked and read with the task (one round trip), for SucceedOperation.
		v, err := updateAtCommit(port.LockingOperation(ctx), f.Tasks, id, func(v *T) error {
			t := f.TaskOf(v)
			if t.Status.Terminal() {
				finished = v
				return errFinished
			}
			var err error
			if result, err = f.Record(ctx, v, r); err != nil {
				return err
			}
			return t.Succeed(d.Now())
		})
		if err != nil {
			return err
		}
		return d.SucceedOperation(ctx, f.TaskOf(&v).OperationID, result)
	})
	if errors.Is(err, ErrSkip) && finished != nil && f.Finished != nil {
		f.Finished(ctx, *finished, r)
	}
	return err
}

// failed records what else a final failure of task changes: OnFail, else Kind.OnFail.
func (f Flow[T, W, R]) failed(ctx context.Context, task T, r R, fl Failure) error {
	switch {
	case f.OnFail != nil:
		return f.OnFail(ctx, task, r, fl)
	case f.Kind.OnFail != nil:
		return f.Kind.OnFail(ctx, task, fl)
	}
	return nil
}

// decide is the error policy of every flow. It returns the attempt's outcome and the error
// Handle returns.
func (f Flow[T, W, R]) decide(ctx context.Context, job Job, id uuid.UUID, r R, err error) (string, error) {
	var ref refusal
	var wait budgetWait
	var fw fenceWait
	switch {
	case err == nil:
		return OutcomeSucceeded, nil
	case errors.As(err, &wait):
		return OutcomeWaiting, &SnoozeError{Delay: wait.delay, Err: err, Wait: true}
	case errors.As(err, &fw):
		return OutcomeWaiting, &SnoozeError{Delay: fw.delay + FenceMargin, Err: err, Wait: true}
	case errors.Is(err, ErrSkip):
		return OutcomeSkipped, nil
	case errors.As(err, &ref):
		// Recorded by the begin step with the refusal.
		return OutcomeFailed, Permanent(err)
	case ctx.Err() != nil:
		// The job is no longer this worker's to finish (cut short by shutdown, its lock
		// lost, or past its lease): record nothing; the transport decides what comes next.
		return OutcomeRetry, err
	}
	var h heldError
	if errors.As(err, &h) {
		if !job.LastAttempt {
			return OutcomeHeld, err
		}
		// The call succeeded: no failure is recorded over it, and the last attempt is not
		// spent on a record step that gave up: the job is snoozed (a snooze, not an
		// attempt), and its next delivery records the held result without calling. Once the
		// snoozes are spent the job ends and the reconciler delivers the task again.
		if canSnooze(job, HeldRetry) {
			return OutcomeHeld, &SnoozeError{Delay: HeldRetry, Err: err}
		}
		return OutcomeHeld, Permanent(err)
	}
	if delay, ok := retryAfter(err); ok && !permanent(err) && canSnooze(job, delay) {
		return OutcomeSnoozed, &SnoozeError{Delay: delay, Err: err}
	}
	if !permanent(err) && !job.LastAttempt {
		return OutcomeRetry, err
	}
	fl := FailureOf(err)
	if _, looked := LastLookOf(job); f.LastLook != nil && !looked && id != uuid.Nil {
		lookErr := f.Deps.Step(ctx, job, func(ctx context.Context) error { return f.Kind.RequestLastLook(ctx, id, fl) })
		switch {
		case lookErr == nil:
			return OutcomeLastLook, Permanent(err)
		case errors.Is(lookErr, ErrSkip):
			return OutcomeSkipped, nil
		case !isNotFound(lookErr) && !job.LastAttempt:
			return OutcomeRetry, fmt.Errorf("%w; requesting the last look: %v", err, lookErr)
		case !isNotFound(lookErr):
			return OutcomeLost, Permanent(fmt.Errorf("%w; requesting the last look: %v", err, lookErr))
		}
	}
	recErr := f.recordFailure(ctx, job, id, r, fl)
	switch {
	case recErr == nil:
		return OutcomeFailed, Permanent(err)
	case !job.LastAttempt:
		// Not recorded: deliver again, which records it (or succeeds).
		return OutcomeRetry, fmt.Errorf("%w; recording the failure: %v", err, recErr)
	}
	return OutcomeLost, Permanent(fmt.Errorf("%w; recording the failure: %v", err, recErr))
}

// look is the delivery of a last look (LastLookOf): unless the task is finished, it asks the
// upstream (LastLook, outside any transaction) and records what it found: the success
// (record, with its retries), or, with the look's completion (domain.Task.Looked), the
// failure it held. A look that fails is retried by the transport; on the last attempt it
// records nothing and the reconciler asks it again: no final failure without a completed
// look.
func (f Flow[T, W, R]) look(ctx context.Context, job Job, id uuid.UUID, held Failure) (string, error) {
	d := f.Deps
	tx := Tx(func(ctx context.Context, fn func(ctx context.Context) error) error { return d.Step(ctx, job, fn) })
	var task T
	err := tx(ctx, func(ctx context.Context) error {
		v, err := f.Tasks.Get(ctx, id)
		if err == nil && f.TaskOf(&v).Status.Terminal() {
			return ErrSkip
		}
		task = v
		return err
	})
	if err == nil {
		// A call that may still land would make the look's answer stale: wait for its fence.
		if wait, ok := f.TaskOf(&task).Fenced(d.Now()); ok {
			e := fenceWait{wait}
			return OutcomeWaiting, &SnoozeError{Delay: wait + FenceMargin, Err: e, Wait: true}
		}
	}
	if err == nil {
		// The failure the task's look holds (the first one asked for) prevails over the
		// event's.
		if l := f.TaskOf(&task).Look; l.Asked() {
			held = Failure{Code: l.Code, Message: l.Message}
		}
	}
	heldErr := Permanent(domain.NewError(domain.KindUnavailable, held.Code, held.Message))
	var r R
	done := false
	attempts := 0
	if err == nil {
		attempts = f.TaskOf(&task).Attempts
		r, done, err = f.LastLook(ctx, task, tx)
	}
	switch {
	case errors.Is(err, ErrSkip):
		return OutcomeSkipped, nil
	case ctx.Err() != nil:
		return OutcomeRetry, err
	case isNotFound(err):
		// The task is gone: fail the operation its event names (recordFailure).
	case err != nil && !job.LastAttempt && !permanent(err):
		return OutcomeRetry, fmt.Errorf("last look: %w", err)
	case err != nil:
		// No look completed: nothing is recorded; the reconciler asks again.
		return OutcomeLost, Permanent(fmt.Errorf("last look (asked again by the reconciler): %w", err))
	case done:
		err = f.record(ctx, job, id, r)
		switch {
		case err == nil || errors.Is(err, ErrSkip):
			return OutcomeSucceeded, nil
		case ctx.Err() != nil || !job.LastAttempt:
			return OutcomeRetry, err
		}
		// The success cannot be recorded: the held failure is not recorded over it either;
		// the reconciler asks the look again, which records it.
		f.looked(ctx, job, id, domain.LookDone)
		return OutcomeLost, Permanent(err)
	}
	looked := attempts
	if isNotFound(err) {
		looked = -1
	}
	if recErr := f.recordFailureLooked(ctx, job, id, r, held, looked); recErr != nil {
		if errors.Is(recErr, errStartedSince) {
			// A delivery started the task after the look read it: its call may land after
			// what the look saw, so the look's answer is stale. That run decides.
			return OutcomeSkipped, nil
		}
		if !job.LastAttempt {
			return OutcomeRetry, fmt.Errorf("%w; recording the failure: %v", heldErr, recErr)
		}
		// The look completed: the reconciler records the failure it held.
		f.looked(ctx, job, id, domain.LookNotDone)
		return OutcomeLost, Permanent(fmt.Errorf("%w; recording the failure: %v", heldErr, recErr))
	}
	return OutcomeFailed, heldErr
}

// looked records, in a transaction of its own bounded by HoldTimeout, that task id's last
// look completed and found found, for the reconciler; best effort (without it the reconciler
// asks the look again).
func (f Flow[T, W, R]) looked(ctx context.Context, job Job, id uuid.UUID, found string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HoldTimeout)
	defer cancel()
	_ = f.Deps.Step(ctx, job, func(ctx context.Context) error {
		_, err := f.Tasks.Update(ctx, id, func(v *T) error { return f.TaskOf(v).Looked(found, f.Deps.Now()) })
		return err
	})
}

// recordFailure fails the task and its operation with fl. A finished task is left alone. A
// task that does not exist (deleted with its store or product, or an id of no task) fails
// the operation its request event names, so that the client does not wait for ever.
func (f Flow[T, W, R]) recordFailure(ctx context.Context, job Job, id uuid.UUID, r R, fl Failure) error {
	return f.recordFailureLooked(ctx, job, id, r, fl, -1)
}

// errStartedSince: a delivery started the task after its last look read it (look).
var errStartedSince = errors.New("worker: the task started again after its last look read it")

// recordFailureLooked is recordFailure that, when looked is not negative, records with the
// failure that the task's last look completed and found the work absent (domain.Task.Looked):
// looked is the task's Attempts when the look read it, and a task started since (a run whose
// call the look could not see) is left alone with errStartedSince.
func (f Flow[T, W, R]) recordFailureLooked(ctx context.Context, job Job, id uuid.UUID, r R, fl Failure, looked int) error {
	if id == uuid.Nil {
		return nil // no task to fail: the payload was unreadable
	}
	d := f.Deps
	var before func(*domain.Task) error
	if looked >= 0 {
		before = func(t *domain.Task) error {
			if t.Attempts != looked {
				return errStartedSince
			}
			return t.Looked(domain.LookNotDone, d.Now())
		}
	}
	err := d.Step(ctx, job, func(ctx context.Context) error {
		t, err := failTask(ctx, d, f.Tasks, id, f.TaskOf, fl, before)
		if isNotFound(err) {
			if op := operationOf(job); op != uuid.Nil {
				return d.FailOperation(ctx, op, fl.Code, fl.Message)
			}
		}
		if err != nil {
			return err
		}
		return f.failed(ctx, t, r, fl)
	})
	if errors.Is(err, ErrSkip) || isNotFound(err) {
		return nil
	}
	return err
}

// operationOf reads the operation_id every request event carries; uuid.Nil when absent.
func operationOf(job Job) uuid.UUID {
	var ev struct {
		OperationID uuid.UUID `json:"operation_id"`
	}
	_ = json.Unmarshal(job.Payload, &ev)
	return ev.OperationID
}

func permanent(err error) bool { return IsPermanent(err) || port.IsPermanent(err) }

// retryAfter reads the wait an upstream asked for (a 429 or 503 with Retry-After).
func retryAfter(err error) (time.Duration, bool) {
	var de *domain.Error
	if errors.As(err, &de) && de.RetryAfter > 0 {
		return de.RetryAfter, true
	}
	return 0, false
}

func isNotFound(err error) bool {
	var de *domain.Error
	return errors.As(err, &de) && de.Kind == domain.KindNotFound
}
