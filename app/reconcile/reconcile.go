// Package reconcile keeps the promise that an accepted request is processed once
// BullMQ holds its job: the domain task, not the queue, knows whether the work is done. The
// Reconciler periodically finds tasks that are neither finished nor moving — their job was
// failed outside any handler, removed, or lost with Redis — and asks for them again through
// the outbox, under a new job id (the old one may still be held by BullMQ's deduplication).
// Workers compare-and-set on the task, so a second delivery of a task that was merely slow
// changes nothing twice. Only a run spends a try: a task whose handler has not started since
// its previous delivery (its job lost with Redis while it waited in a backlog) is delivered
// again for free, with a backoff, until it is MaxAge old (from its first dispatch); a task
// that ran and keeps coming back is failed after MaxReconciliations. Both fail with the code
// DELIVERY_EXHAUSTED. A flow that asks a last look records no final failure without a
// completed look: the reconciler asks the look instead, asks it again (with the same backoff)
// while none completed, and fails the task OUTCOME_UNKNOWN when none completed before MaxAge.
//
// One Reconciler runs at a time across processes (StuckTasks.Exclusive); it works per
// workspace, in transactions of that workspace, under RLS like the dispatcher. It holds no
// task row while it asks Redis about the tasks' jobs (Probe): it finds the candidates, lets
// them go, probes, and reconciles, under the row lock, only those that did not move since.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
)

// Defaults of Config.
const (
	DefaultAfter              = 15 * time.Minute
	DefaultInterval           = time.Minute
	DefaultMaxReconciliations = 3
	DefaultMaxAge             = 24 * time.Hour
	DefaultBatch              = 100
	DefaultWorkspaces         = 1000
)

// Config configures a Reconciler.
type Config struct {
	// Kinds are the tasks to watch, one per queue. Required.
	Kinds []worker.TaskKind
	// Stuck finds stuck tasks. Required.
	Stuck port.StuckTasks
	// Tx opens the per-workspace transactions. Required.
	Tx port.Transactor
	// Probe, when set, tells whether a task's last job is still queued or running: such a
	// task is only waiting (a backlog), not stuck, and is left alone. Without a probe (the
	// memory transport keeps no jobs) every task unmoved past its threshold is stuck.
	Probe port.JobProbe
	// After is how long a task may stay unfinished without moving before it counts as
	// stuck, per queue; queues not named use DefaultAfter. It must exceed the longest a
	// healthy task goes without moving: its longest job plus the backoff of its retries, and
	// the longest wait an upstream Retry-After may impose.
	After map[string]time.Duration
	// DefaultAfter applies to queues not in After. Default DefaultAfter (15m).
	DefaultAfter time.Duration
	// Interval between sweeps. Default DefaultInterval (1m).
	Interval time.Duration
	// MaxReconciliations is how often one task is delivered again before it fails with
	// DELIVERY_EXHAUSTED; 0 fails a stuck task at once (DefaultMaxReconciliations is 3).
	// Only deliveries of a task that ran since its previous delivery count.
	MaxReconciliations int
	// MaxAge is how long, from its first dispatch, a task whose handler has not started is
	// delivered again before it fails with DELIVERY_EXHAUSTED (TASK_MAX_AGE). Such deliveries
	// back off: after the n-th, the task is stuck again only when unmoved for its queue's
	// After + Interval × (2^min(n, port.MaxRedeliveryDoublings) − 1). Default DefaultMaxAge
	// (24h).
	MaxAge time.Duration
	// Batch bounds the tasks of one queue handled per workspace and sweep. Default 100.
	Batch int
	// Now tells the time. Default time.Now.
	Now func() time.Time
	// Log receives one line per task reconciled and per failed workspace. Default
	// slog.Default().
	Log *slog.Logger
	// Registerer receives listing_reconciliations_total{queue,outcome}. Optional.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.DefaultAfter == 0 {
		c.DefaultAfter = DefaultAfter
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Validate reports the first invalid field. It does not change c.
func (c Config) Validate() error {
	switch {
	case len(c.Kinds) == 0 || c.Stuck == nil || c.Tx == nil:
		return errors.New("reconcile: Kinds, Stuck and Tx are required")
	case c.DefaultAfter < 0 || c.Interval < 0 || c.MaxReconciliations < 0 || c.Batch < 0 || c.MaxAge < 0:
		return errors.New("reconcile: DefaultAfter, Interval, MaxReconciliations, Batch and MaxAge must not be negative")
	}
	for q, d := range c.After {
		if d <= 0 {
			return fmt.Errorf("reconcile: After[%s] must be positive", q)
		}
	}
	return nil
}

// Reconciler finds stuck tasks and delivers them again; see the package comment.
type Reconciler struct {
	cfg   Config
	after map[string]time.Duration
	// minAfter is the shortest of after: older than that, a workspace may hold a stuck task.
	minAfter time.Duration
	total    *prometheus.CounterVec
}

// New returns a Reconciler.
func New(cfg Config) (*Reconciler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Reconciler{cfg: cfg, after: map[string]time.Duration{}}
	for _, k := range cfg.Kinds {
		r.after[k.Queue()] = cfg.DefaultAfter
		if d, ok := cfg.After[k.Queue()]; ok {
			r.after[k.Queue()] = d
		}
	}
	for q := range cfg.After {
		if _, ok := r.after[q]; !ok {
			return nil, fmt.Errorf("reconcile: After names %q, which no Kind watches", q)
		}
	}
	r.minAfter = slices.Min(slices.Collect(maps.Values(r.after)))
	r.total = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "listing_reconciliations_total",
		Help: "Stuck tasks the reconciler delivered again after they ran (redelivered) or without their handler having started since the previous delivery (redelivered_unrun, spends no try), sent to a last look before a final failure or asked it again as no look completed (last_look), failed with DELIVERY_EXHAUSTED or the failure a completed look held (exhausted), or failed with OUTCOME_UNKNOWN as no look completed before TASK_MAX_AGE (outcome_unknown).",
	}, []string{"queue", "outcome"})
	for _, k := range cfg.Kinds {
		r.total.WithLabelValues(k.Queue(), string(worker.Redelivered))
		r.total.WithLabelValues(k.Queue(), string(worker.RedeliveredUnrun))
		r.total.WithLabelValues(k.Queue(), string(worker.Exhausted))
		r.total.WithLabelValues(k.Queue(), string(worker.LastLooked))
		r.total.WithLabelValues(k.Queue(), string(worker.OutcomeUnknown))
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.total); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("reconcile.New: %w", err)
			}
			r.total = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return r, nil
}

// Result counts what one sweep did.
type Result struct {
	// Ran is false when another process held the sweep.
	Ran        bool
	Workspaces int
	// Redelivered counts tasks delivered again after they ran; Unrun those delivered again
	// for free, their handler not started since the previous delivery.
	Redelivered int
	Unrun       int
	Exhausted   int
	// LastLooks counts tasks sent to their last look, or asked it again.
	LastLooks int
	// Unknown counts tasks failed OUTCOME_UNKNOWN: no last look completed before MaxAge.
	Unknown int
	// Failed counts workspaces whose transaction failed (logged; retried next sweep).
	Failed int
}

// Run sweeps now and every Interval until ctx ends. Errors are logged, never fatal.
func (r *Reconciler) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Log.ErrorContext(ctx, "reconcile: sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce sweeps every workspace holding a stuck task once, unless another process is
// sweeping. A workspace whose transaction fails is logged and counted in Failed; its tasks
// are taken again by the next sweep.
func (r *Reconciler) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	ran, err := r.cfg.Stuck.Exclusive(ctx, "reconcile", func(ctx context.Context) error {
		now := r.cfg.Now()
		wss, err := r.cfg.Stuck.Workspaces(ctx, now.Add(-r.minAfter), DefaultWorkspaces)
		if err != nil {
			return err
		}
		res.Workspaces = len(wss)
		for _, ws := range wss {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			done, err := r.workspace(ctx, ws, now)
			if err != nil {
				res.Failed++
				r.cfg.Log.ErrorContext(ctx, "reconcile: workspace failed; retried next sweep",
					"workspace_id", ws.String(), "err", err)
				continue
			}
			for _, d := range done {
				r.total.WithLabelValues(d.queue, string(d.outcome)).Inc()
				level := slog.LevelWarn
				switch d.outcome {
				case worker.Exhausted:
					res.Exhausted++
					level = slog.LevelError
				case worker.OutcomeUnknown:
					res.Unknown++
					level = slog.LevelError
				case worker.LastLooked:
					res.LastLooks++
				case worker.RedeliveredUnrun:
					res.Unrun++
				default:
					res.Redelivered++
				}
				r.cfg.Log.Log(ctx, level, "reconcile: stuck task", "outcome", string(d.outcome), "queue", d.queue,
					"workspace_id", ws.String(), "task_id", d.id.String(), "stuck_after", r.after[d.queue].String())
			}
		}
		return nil
	})
	res.Ran = ran
	if err != nil {
		return res, fmt.Errorf("reconcile.RunOnce: %w", err)
	}
	return res, nil
}

// unqueued returns the tasks whose last job the Probe does not see unfinished. A failing
// probe fails the workspace's sweep (retried next sweep): without it a backlog could not be
// told from a loss.
func (r *Reconciler) unqueued(ctx context.Context, queue string, tasks []port.StuckTask) (map[probed]bool, error) {
	var jobs []string
	for _, t := range tasks {
		if t.LastJobID != "" {
			jobs = append(jobs, t.LastJobID)
		}
	}
	queued := map[string]bool{}
	if r.cfg.Probe != nil && len(jobs) > 0 {
		var err error
		if queued, err = r.cfg.Probe.Unfinished(ctx, queue, jobs); err != nil {
			return nil, fmt.Errorf("probe the jobs of %s: %w", queue, err)
		}
	}
	out := make(map[probed]bool, len(tasks))
	for _, t := range tasks {
		if !queued[t.LastJobID] {
			out[probed{t.ID, t.LastJobID}] = true
		}
	}
	return out, nil
}

// probed is a task as probed: the same task with another last job moved meanwhile.
type probed struct {
	id        uuid.UUID
	lastJobID string
}

// reconciled is one task a sweep delivered again or failed.
type reconciled struct {
	queue   string
	id      uuid.UUID
	outcome worker.Reconciled
}

// workspace reconciles the stuck tasks of workspace ws in three moves, so that no task row
// is held across the Probe (a call to Redis): the candidates are found in a transaction of
// their own (which ends, letting their rows go); the Probe asks about their last jobs outside
// any transaction; then, in a second transaction, the tasks are found again under their row
// locks and only those that did not move meanwhile (still stuck, with the same last job as
// probed) are reconciled.
func (r *Reconciler) workspace(ctx context.Context, ws uuid.UUID, now time.Time) ([]reconciled, error) {
	found := make(map[string][]port.StuckTask, len(r.cfg.Kinds))
	if err := r.cfg.Tx.InTx(ctx, ws, uuid.Nil, func(ctx context.Context) error {
		for _, k := range r.cfg.Kinds {
			tasks, err := r.cfg.Stuck.Find(ctx, k.Queue(), now.Add(-r.after[k.Queue()]), r.cfg.Interval, r.cfg.Batch)
			if err != nil {
				return err
			}
			found[k.Queue()] = tasks
		}
		return nil
	}); err != nil {
		return nil, err
	}
	stuck := make(map[string]map[probed]bool, len(found))
	some := false
	for queue, tasks := range found {
		if len(tasks) == 0 {
			continue
		}
		ts, err := r.unqueued(ctx, queue, tasks)
		if err != nil {
			return nil, err
		}
		stuck[queue] = ts
		some = some || len(ts) > 0
	}
	if !some {
		return nil, nil
	}
	var done []reconciled
	err := r.cfg.Tx.InTx(ctx, ws, uuid.Nil, func(ctx context.Context) error {
		done = done[:0]
		for _, k := range r.cfg.Kinds {
			if len(stuck[k.Queue()]) == 0 {
				continue
			}
			again, err := r.cfg.Stuck.Find(ctx, k.Queue(), now.Add(-r.after[k.Queue()]), r.cfg.Interval, r.cfg.Batch)
			if err != nil {
				return err
			}
			for _, t := range again {
				if !stuck[k.Queue()][probed{t.ID, t.LastJobID}] {
					continue // moved since it was probed, or not probed: the next sweep looks again
				}
				outcome, err := k.Reconcile(ctx, t, worker.RedeliveryPolicy{Max: r.cfg.MaxReconciliations, MaxAge: r.cfg.MaxAge})
				if err != nil {
					return err
				}
				if outcome != worker.Unchanged {
					done = append(done, reconciled{queue: k.Queue(), id: t.ID, outcome: outcome})
				}
			}
		}
		return nil
	})
	return done, err
}
