// Package jobs runs the application's job handlers (app/worker) on BullMQ queues: one
// infra/bullmq Worker per queue, each job's data decoded as API.md's envelope and handed to
// the queue's worker.Handler. A handler error is retried by BullMQ with the job's backoff; a
// worker.Permanent error (or the last attempt) fails the job for good. Metrics reports job
// outcomes and handler time; QueueCollector reports queue depth at scrape time.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/listingkit/listing/app/worker"
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
		w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: cfg.BullMQ, Queue: queue, Concurrency: cfg.Concurrency,
			Name: "listing"}, Adapt(queue, h, cfg.Logger, m))
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
		env, err := j.Envelope()
		if err != nil {
			outcomes.WithLabelValues(OutcomeFailed).Inc()
			return nil, bullmq.Unrecoverable(fmt.Errorf("job %s: data is not a job envelope", j.ID))
		}
		ws, err := uuid.Parse(env.WorkspaceID)
		if err != nil {
			outcomes.WithLabelValues(OutcomeFailed).Inc()
			return nil, bullmq.Unrecoverable(fmt.Errorf("job %s: bad workspace_id", j.ID))
		}
		attempts := 1
		if j.Opts != nil && j.Opts.Attempts > 0 {
			attempts = j.Opts.Attempts
		}
		job := worker.Job{ID: j.ID, WorkspaceID: ws, EventType: env.EventType, Payload: env.Payload,
			Attempt: j.AttemptsMade + 1, LastAttempt: j.AttemptsMade+1 >= attempts}
		start := time.Now()
		err = handle(ctx, h, job)
		took := time.Since(start)
		duration.Observe(took.Seconds())
		if err == nil {
			outcomes.WithLabelValues(OutcomeCompleted).Inc()
			return map[string]any{"ok": true}, nil
		}
		log.WarnContext(ctx, "job failed", "queue", queue, "job_id", j.ID, "event_type", env.EventType,
			"workspace_id", ws.String(), "attempt", job.Attempt, "last_attempt", job.LastAttempt,
			"duration_ms", took.Milliseconds(), "err", err)
		switch {
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

// handle runs h, turning a panic into an error, so that the attempt is counted and logged
// like any other failure (bullmq.Worker recovers too, but below the metrics).
func handle(ctx context.Context, h worker.Handler, job worker.Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("job handler panicked: %v", r)
		}
	}()
	return h.Handle(ctx, job)
}
