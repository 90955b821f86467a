// Package jobs runs the application's job handlers (app/worker) on BullMQ queues: one
// infra/bullmq Worker per queue, each job's data decoded as the app's envelope
// (worker.DecodeEnvelope) and handed to the queue's worker.Handler, whose error says what
// becomes of the job: nil completes it, a worker.SnoozeError delays it without spending an
// attempt, a worker.Permanent error fails it for good, any other error is retried by BullMQ
// with the job's backoff (or fails it on the last attempt). The handlers log each attempt;
// this package counts them (Metrics) and reports queue depth at scrape time
// (QueueCollector).
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/metrics"
)

// Config configures a Runner.
type Config struct {
	// BullMQ is the shared queue configuration (Redis client, prefix). Required.
	BullMQ bullmq.Config
	// Concurrency is how many jobs of each queue run at once. Default 4.
	Concurrency int
	// Handlers maps each queue to its handler. Required.
	Handlers map[string]worker.Handler
	// Logger receives one line per failed job attempt and per failed queue-depth read.
	// Default slog.Default().
	Logger *slog.Logger
	// Kinds describes the task of each queue (optional per queue): a job that the queue fails
	// without running its handler (stalled more than MaxStalledCount times) records a final
	// failure, JOB_STALLED, on its task through the queue's Kind.
	Kinds map[string]worker.TaskKind
	// LockDuration, StalledInterval and MaxStalledCount are the BullMQ workers' (see
	// bullmq.WorkerConfig; zero: its defaults).
	LockDuration    time.Duration
	StalledInterval time.Duration
	MaxStalledCount int
	// Registerer receives the Metrics and a QueueCollector of the Handlers' queues.
	// Optional: nil keeps the metrics unregistered. Collectors already registered on it
	// (by another Runner) are reused.
	Registerer prometheus.Registerer
}

// Runner consumes every queue of Config.Handlers until its context ends.
type Runner struct {
	workers []*bullmq.Worker
}

// NewRunner builds one BullMQ worker per queue.
func NewRunner(cfg Config) (*Runner, error) {
	if len(cfg.Handlers) == 0 {
		return nil, errors.New("jobs.NewRunner: no handlers")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m, err := NewMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("jobs.NewRunner: %w", err)
	}
	r := &Runner{}
	queues := make([]string, 0, len(cfg.Handlers))
	for queue, h := range cfg.Handlers {
		wc := bullmq.WorkerConfig{Config: cfg.BullMQ, Queue: queue, Concurrency: cfg.Concurrency, Name: "listing",
			LockDuration: cfg.LockDuration, StalledInterval: cfg.StalledInterval, MaxStalledCount: cfg.MaxStalledCount}
		if k, ok := cfg.Kinds[queue]; ok {
			wc.DeferredFailureFunc = abandon(queue, k, cfg.Logger, m)
		}
		w, err := bullmq.NewWorker(wc, Adapt(queue, h, cfg.Logger, m))
		if err != nil {
			return nil, fmt.Errorf("jobs.NewRunner %s: %w", queue, err)
		}
		r.workers = append(r.workers, w)
		queues = append(queues, queue)
		m.initQueue(queue)
	}
	if cfg.Registerer != nil {
		var regErr error
		metrics.Register(cfg.Registerer, NewQueueCollector(cfg.BullMQ, queues, cfg.Logger), &regErr)
		if regErr != nil {
			return nil, fmt.Errorf("jobs.NewRunner: %w", regErr)
		}
	}
	return r, nil
}

// Run consumes until ctx ends, then shuts every worker down gracefully.
func (r *Runner) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, w := range r.workers {
		g.Go(func() error { return w.Run(ctx) })
	}
	return g.Wait()
}

// Adapt turns a worker.Handler into a BullMQ handler that records each attempt in m
// (nil: no metrics). A handler panic is an error of that attempt.
func Adapt(queue string, h worker.Handler, log *slog.Logger, m *Metrics) bullmq.HandlerFunc {
	if m == nil {
		m, _ = NewMetrics(nil)
	}
	outcomes, duration := m.Jobs.MustCurryWith(prometheus.Labels{"queue": queue}), m.Duration.WithLabelValues(queue)
	return func(ctx context.Context, j *bullmq.Job) (any, error) {
		job, err := jobOf(j)
		if err != nil {
			outcomes.WithLabelValues(OutcomeFailed).Inc()
			log.ErrorContext(ctx, "job", "queue", queue, "job_id", j.ID, "outcome", worker.OutcomeFailed, "error", err.Error())
			return nil, bullmq.Unrecoverable(err)
		}
		start := time.Now()
		err = handle(ctx, h, job, queue, log)
		duration.Observe(time.Since(start).Seconds())
		if delay, ok := worker.SnoozeOf(err); ok {
			outcomes.WithLabelValues(OutcomeSnoozed).Inc()
			return nil, bullmq.Snooze(delay, err)
		}
		switch {
		case err == nil:
			outcomes.WithLabelValues(OutcomeCompleted).Inc()
			return map[string]any{"ok": true}, nil
		case ctx.Err() != nil && errors.Is(err, context.Canceled):
			// Shutdown: the bullmq Worker hands the job back without counting an attempt.
		case worker.IsPermanent(err):
			outcomes.WithLabelValues(OutcomeFailed).Inc()
			return nil, bullmq.Unrecoverable(err)
		case job.LastAttempt:
			outcomes.WithLabelValues(OutcomeFailed).Inc()
		default:
			outcomes.WithLabelValues(OutcomeRetry).Inc()
		}
		return nil, err
	}
}

// handle runs h, turning a panic into an error of the attempt, counted like any other
// failure (bullmq.Worker recovers too, but below the metrics). A panic skipped the
// handler's own log line, so it is logged here.
func handle(ctx context.Context, h worker.Handler, job worker.Job, queue string, log *slog.Logger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("job handler panicked: %v", r)
			log.ErrorContext(ctx, "job", "queue", queue, "job_id", job.ID, "event_type", job.EventType,
				"workspace_id", job.WorkspaceID.String(), "attempt", job.Attempt, "outcome", worker.OutcomeRetry,
				"error", err.Error())
		}
	}()
	return h.Handle(ctx, job)
}

// jobOf reads the job envelope of j (an error is worker.Permanent).
func jobOf(j *bullmq.Job) (worker.Job, error) {
	env, err := worker.DecodeEnvelope(j.Data)
	if err != nil {
		return worker.Job{}, fmt.Errorf("job %s: %w", j.ID, err)
	}
	attempts := 1
	if j.Opts != nil {
		attempts = j.Opts.Attempts
	}
	return env.Job(worker.Delivery{ID: j.ID, Attempt: j.AttemptsMade + 1, Attempts: attempts,
		Snoozes: j.Snoozes, Snoozed: j.Snoozed}), nil
}

// abandon returns the bullmq.WorkerConfig.DeferredFailureFunc of a queue: the job's task
// fails with JOB_STALLED (a worker that keeps dying on it), counted as a failed job.
func abandon(queue string, k worker.TaskKind, log *slog.Logger, m *Metrics) func(context.Context, *bullmq.Job, string) error {
	failed := m.Jobs.WithLabelValues(queue, OutcomeFailed)
	return func(ctx context.Context, j *bullmq.Job, reason string) error {
		failed.Inc()
		job, err := jobOf(j)
		if err != nil {
			return err
		}
		log.ErrorContext(ctx, "job failed without running: its task fails", "queue", queue, "job_id", j.ID,
			"event_type", job.EventType, "workspace_id", job.WorkspaceID.String(), "reason", reason,
			"code", domain.ErrJobStalled.Code)
		return k.Abandon(ctx, job, worker.FailureOf(domain.ErrJobStalled))
	}
}
