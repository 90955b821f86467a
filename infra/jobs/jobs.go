// Package jobs runs the application's job handlers (app/worker) over a transport: a
// watermill message.Subscriber that delivers each queue's jobs (topic = queue name), and the
// transport's way to settle a job once its handler returned (Transport). Two transports
// exist: BullMQ (production; NewBullMQ) and Memory (a GoChannel in one process, whose
// retries go back through the outbox; NewMemory).
//
// Each job's data is decoded as the app's envelope (worker.DecodeEnvelope) and handed to the
// queue's worker.Handler, whose error says what becomes of the job: nil completes it, a
// worker.SnoozeError delays it without spending an attempt, a worker.Permanent error fails
// it for good, any other error is retried with the job's backoff (or fails it on the last
// attempt). A job the transport fails whatever its handler does (BullMQ: stalled too often)
// fails its task through the queue's worker.TaskKind. The handlers log each attempt; this
// package counts them (Metrics).
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/metrics"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/tracing"
)

// Transport delivers jobs and settles them. Implementations are safe for concurrent use.
type Transport interface {
	// Subscriber delivers the jobs of each queue (topic = queue name). The Runner does not
	// close it.
	Subscriber() message.Subscriber
	// Delivery reads what the transport knows of msg's delivery. deferred, when not empty,
	// is why the transport fails the job whatever its handler would do: the handler is not
	// run, the job's task fails (JOB_STALLED).
	Delivery(msg *message.Message) (d worker.Delivery, deferred string)
	// Settle acks or nacks msg, whose handler returned err for job (see the package
	// comment). Two errors are the shutdown's: ErrNotStarted (the Runner was stopping when
	// msg arrived and did not run it: give the job back at once, no attempt spent) and
	// context.Canceled with ctx done (the handler was cut short past the stop bound and may
	// have left a call in flight: the job must not run again before that call's time-out
	// passed).
	Settle(ctx context.Context, msg *message.Message, job worker.Job, err error)
}

// Config configures a Runner.
type Config struct {
	// Transport delivers and settles the jobs. Required.
	Transport Transport
	// Concurrency is how many jobs of each queue run at once. Default 4.
	Concurrency int
	// Handlers maps each queue to its handler. Required.
	Handlers map[string]worker.Handler
	// Kinds describes the task of each queue (optional per queue), to fail the task of a job
	// the transport fails without its handler.
	Kinds map[string]worker.TaskKind
	// ShutdownTimeout is the stop bound: how long running handlers may go on after Run's
	// context ended, to finish and record what they started, before their context is
	// cancelled. It must exceed the longest external call's time-out plus the record step's
	// retries (worker.RecordRetryBudget; config checks WORKER_STOP_TIMEOUT at startup).
	// Default 10s.
	ShutdownTimeout time.Duration
	// JobTimeout, when positive, bounds each handler call (its context's deadline).
	JobTimeout time.Duration
	// Logger receives a line for what no handler logged (a panic, an unreadable envelope, a
	// deferred failure). Default slog.Default().
	Logger *slog.Logger
	// TaskEnded, when set, is called with the queue and the job after a handler returned
	// an outcome that ends the job's task (completed, failed for good, or failed without
	// running), once the task's end is committed: fair share (outbox.FairShare) wakes the
	// dispatchers there, so that the slot the task freed is refilled at once.
	TaskEnded func(queue string, job worker.Job)
	// Registerer receives the Metrics and, when the Transport has one (QueueCollectors), a
	// collector of its queues' depth. Optional: nil keeps them unregistered. Collectors
	// already registered on it (by another Runner) are reused.
	Registerer prometheus.Registerer
}

// Taker is a Transport that must take a job before its handler runs (the memory transport:
// its outbox event's lease). A job Take refuses is not run: the Runner settles it with
// ErrNotTaken wrapping Take's error.
type Taker interface {
	Take(ctx context.Context, msg *message.Message, job worker.Job) error
}

// ErrNotTaken is what the Runner settles a message with when the transport's Take refused
// its job: its handler did not run.
var ErrNotTaken = errors.New("jobs: not taken")

// QueueCollectors is a Transport that reports the depth of its queues.
type QueueCollectors interface {
	QueueCollector(queues []string, log *slog.Logger) prometheus.Collector
}

// Runner consumes every queue of Config.Handlers until its context ends.
type Runner struct {
	cfg     Config
	metrics *Metrics
}

// NewRunner returns a Runner.
func NewRunner(cfg Config) (*Runner, error) {
	if len(cfg.Handlers) == 0 || cfg.Transport == nil {
		return nil, errors.New("jobs.NewRunner: Transport and Handlers are required")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m, err := NewMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("jobs.NewRunner: %w", err)
	}
	queues := make([]string, 0, len(cfg.Handlers))
	for queue := range cfg.Handlers {
		m.initQueue(queue)
		queues = append(queues, queue)
	}
	if qc, ok := cfg.Transport.(QueueCollectors); ok && cfg.Registerer != nil {
		var regErr error
		metrics.Register(cfg.Registerer, qc.QueueCollector(queues, cfg.Logger), &regErr)
		if regErr != nil {
			return nil, fmt.Errorf("jobs.NewRunner: %w", regErr)
		}
	}
	return &Runner{cfg: cfg, metrics: m}, nil
}

// ErrNotStarted is what the Runner settles a message with when it arrives after Run's
// context ended: nothing was started, the transport gives the job back.
var ErrNotStarted = errors.New("jobs: shutting down, not started")

// Run consumes until ctx ends, then stops taking jobs (those handed over meanwhile are
// settled with ErrNotStarted), lets running handlers finish and record (ShutdownTimeout),
// cancels those still running, and returns once every message is settled.
func (r *Runner) Run(ctx context.Context) error {
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()
	go func() {
		<-ctx.Done()
		select {
		case <-time.After(r.cfg.ShutdownTimeout):
			cancelJobs()
		case <-jobCtx.Done():
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	for queue, h := range r.cfg.Handlers {
		msgs, err := r.cfg.Transport.Subscriber().Subscribe(gctx, queue)
		if err != nil {
			return fmt.Errorf("jobs.Run: subscribe %s: %w", queue, err)
		}
		consume := r.consumer(queue, h)
		for range r.cfg.Concurrency {
			g.Go(func() error {
				for msg := range msgs {
					if ctx.Err() != nil {
						r.cfg.Transport.Settle(ctx, msg, worker.Job{ID: msg.UUID}, ErrNotStarted)
						continue
					}
					consume(jobCtx, ctx, msg)
				}
				return nil
			})
		}
	}
	return g.Wait()
}

// consumer returns what handles one message of queue: jobCtx is the handlers' context,
// runCtx the Runner's (done: shutting down).
func (r *Runner) consumer(queue string, h worker.Handler) func(jobCtx, runCtx context.Context, msg *message.Message) {
	log, t := r.cfg.Logger, r.cfg.Transport
	outcomes := r.metrics.Jobs.MustCurryWith(prometheus.Labels{"queue": queue})
	duration := r.metrics.Duration.WithLabelValues(queue)
	wait := r.metrics.Wait.WithLabelValues(queue)
	kind := r.cfg.Kinds[queue]
	return func(jobCtx, runCtx context.Context, msg *message.Message) {
		d, deferred := t.Delivery(msg)
		env, err := worker.DecodeEnvelope(msg.Payload)
		if err != nil {
			outcomes.WithLabelValues(OutcomeFailed).Inc()
			log.ErrorContext(jobCtx, "job", "queue", queue, "job_id", msg.UUID, "outcome", worker.OutcomeFailed, "retry", false,
				"error", err.Error())
			t.Settle(jobCtx, msg, worker.Job{ID: msg.UUID, Attempt: d.Attempt}, err)
			return
		}
		job := env.Job(d)
		if job.Attempt == 1 && job.Snoozes == 0 {
			enqueued := d.EnqueuedAt
			if enqueued.IsZero() {
				enqueued = env.OccurredAt
			}
			if !enqueued.IsZero() {
				wait.Observe(max(time.Since(enqueued).Seconds(), 0))
			}
		}
		if deferred != "" {
			outcomes.WithLabelValues(OutcomeFailed).Inc()
			log.ErrorContext(jobCtx, "job failed without running: its task fails after its last look, or, never started, is delivered again", "queue", queue, "job_id", job.ID,
				"event_type", job.EventType, "workspace_id", job.WorkspaceID.String(), "reason", deferred,
				"code", domain.ErrJobStalled.Code, "retry", false)
			err := worker.Permanent(errors.New(deferred))
			if kind != nil {
				if aerr := kind.Abandon(jobCtx, job, worker.FailureOf(domain.ErrJobStalled)); aerr != nil {
					log.ErrorContext(jobCtx, "recording a deferred failure failed; the reconciler will", "queue", queue,
						"job_id", job.ID, "error", aerr.Error())
				}
			}
			t.Settle(jobCtx, msg, job, err)
			r.taskEnded(queue, job)
			return
		}
		if tk, ok := t.(Taker); ok {
			if terr := tk.Take(jobCtx, msg, job); terr != nil {
				log.WarnContext(jobCtx, "job not taken: its handler does not run", "queue", queue, "job_id", job.ID,
					"event_type", job.EventType, "attempt", job.Attempt, "error", terr.Error())
				t.Settle(jobCtx, msg, job, fmt.Errorf("%w: %w", ErrNotTaken, terr))
				return
			}
		}
		start := time.Now()
		hctx, cancel := context.WithCancel(jobCtx)
		if r.cfg.JobTimeout > 0 {
			hctx, cancel = context.WithTimeout(jobCtx, r.cfg.JobTimeout)
		}
		// The transport cancels the message's context when the job is no longer this
		// process's (BullMQ: its lock was lost): the handler stops before any further call.
		stopLost := context.AfterFunc(msg.Context(), cancel)
		hctx, span := jobSpan(hctx, queue, job)
		err = handle(hctx, h, job, queue, log)
		if err != nil {
			span.SetStatus(codes.Error, worker.FailureOf(err).Code)
		}
		span.End()
		stopLost()
		cancel()
		duration.Observe(time.Since(start).Seconds())
		_, snoozed := worker.SnoozeOf(err)
		ended := false
		switch {
		case err == nil:
			outcomes.WithLabelValues(OutcomeCompleted).Inc()
			ended = true
		case runCtx.Err() != nil && errors.Is(err, context.Canceled):
			// Shutdown: the transport hands the job back without counting an attempt.
		case snoozed:
			outcomes.WithLabelValues(OutcomeSnoozed).Inc()
		case worker.IsPermanent(err) || job.LastAttempt:
			outcomes.WithLabelValues(OutcomeFailed).Inc()
			ended = true
		default:
			outcomes.WithLabelValues(OutcomeRetry).Inc()
		}
		if ended {
			r.taskEnded(queue, job)
		}
		t.Settle(jobCtx, msg, job, err)
	}
}

// taskEnded calls Config.TaskEnded, when set.
func (r *Runner) taskEnded(queue string, job worker.Job) {
	if r.cfg.TaskEnded != nil {
		r.cfg.TaskEnded(queue, job)
	}
}

// handle runs h, turning a panic into an error of the attempt, counted like any other
// failure (bullmq.Worker recovers too, but below the metrics). A panic skipped the
// handler's own log line, so it is logged here.
func handle(ctx context.Context, h worker.Handler, job worker.Job, queue string, log *slog.Logger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("job handler panicked: %v", r)
			outcome := worker.OutcomeRetry
			if job.LastAttempt {
				outcome = worker.OutcomeFailed
			}
			log.ErrorContext(ctx, "job", "queue", queue, "job_id", job.ID, "event_type", job.EventType,
				"workspace_id", job.WorkspaceID.String(), "attempt", job.Attempt, "outcome", outcome,
				"retry", !job.LastAttempt, "error", err.Error())
		}
	}()
	return h.Handle(ctx, job)
}

// jobSpan starts the span of one attempt, continuing the trace of the request that caused
// the job; the events the handler publishes carry the job's correlation id and this span's
// trace context onward.
func jobSpan(ctx context.Context, queue string, job worker.Job) (context.Context, trace.Span) {
	ctx = tracing.Extract(ctx, job.TraceParent, job.TraceState)
	ctx, span := tracing.Start(ctx, "job "+queue, trace.SpanKindConsumer)
	span.SetAttributes(attribute.String("messaging.message.id", job.ID), attribute.String("listing.event_type", job.EventType),
		attribute.Int("listing.attempt", job.Attempt))
	ctx = outbox.WithCorrelationID(ctx, job.CorrelationID)
	traceparent, tracestate := tracing.Inject(ctx)
	return outbox.WithTraceContext(ctx, traceparent, tracestate), span
}

// metaInt reads a decimal metadata value of msg (0 when absent or malformed).
func metaInt(msg *message.Message, key string) int {
	n, _ := strconv.Atoi(msg.Metadata.Get(key))
	return n
}

// metaMillis reads a metadata value of msg in milliseconds.
func metaMillis(msg *message.Message, key string) time.Duration {
	return time.Duration(metaInt(msg, key)) * time.Millisecond
}
