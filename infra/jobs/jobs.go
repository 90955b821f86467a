// Package jobs runs the application's job handlers (app/worker) on BullMQ queues: one
// infra/bullmq Worker per queue, each job's data decoded as API.md's envelope and handed to
// the queue's worker.Handler. A handler error is retried by BullMQ with the job's backoff; a
// worker.Permanent error (or the last attempt) fails the job for good.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/bullmq"
)

// Config configures a Runner.
type Config struct {
	// BullMQ is the shared queue configuration (Redis client, prefix). Required.
	BullMQ bullmq.Config
	// Concurrency is how many jobs of each queue run at once. Default 4.
	Concurrency int
	// Handlers maps each queue to its handler. Required.
	Handlers map[string]worker.Handler
	// Logger receives one line per failed job. Default slog.Default().
	Logger *slog.Logger
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
	r := &Runner{}
	for queue, h := range cfg.Handlers {
		w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: cfg.BullMQ, Queue: queue, Concurrency: cfg.Concurrency,
			Name: "listing"}, Adapt(queue, h, cfg.Logger))
		if err != nil {
			return nil, fmt.Errorf("jobs.NewRunner %s: %w", queue, err)
		}
		r.workers = append(r.workers, w)
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

// Adapt turns a worker.Handler into a BullMQ handler.
func Adapt(queue string, h worker.Handler, log *slog.Logger) bullmq.HandlerFunc {
	return func(ctx context.Context, j *bullmq.Job) (any, error) {
		env, err := j.Envelope()
		if err != nil {
			return nil, bullmq.Unrecoverable(fmt.Errorf("job %s: data is not a job envelope", j.ID))
		}
		ws, err := uuid.Parse(env.WorkspaceID)
		if err != nil {
			return nil, bullmq.Unrecoverable(fmt.Errorf("job %s: bad workspace_id", j.ID))
		}
		attempts := 1
		if j.Opts != nil && j.Opts.Attempts > 0 {
			attempts = j.Opts.Attempts
		}
		job := worker.Job{ID: j.ID, WorkspaceID: ws, EventType: env.EventType, Payload: env.Payload,
			Attempt: j.AttemptsMade + 1, LastAttempt: j.AttemptsMade+1 >= attempts}
		start := time.Now()
		err = h.Handle(ctx, job)
		if err == nil {
			return map[string]any{"ok": true}, nil
		}
		log.WarnContext(ctx, "job failed", "queue", queue, "job_id", j.ID, "event_type", env.EventType,
			"workspace_id", ws.String(), "attempt", job.Attempt, "last_attempt", job.LastAttempt,
			"duration_ms", time.Since(start).Milliseconds(), "err", err)
		if worker.IsPermanent(err) {
			return nil, bullmq.Unrecoverable(err)
		}
		return nil, err
	}
}
