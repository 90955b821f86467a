package console

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/outbox"
)

// The overview's samples (sql/050, sql/054, sql/064): one row per minute and flow, and one per minute
// for the outbox, written by the console (RunSampler) and kept sampleRetention.

const (
	// sampleLag is how long after a minute ends it is sampled: its events committed by its
	// end and delivered within sampleLag are counted, whenever the minute is sampled (an
	// outbox further behind than that shows as owed, not as throughput).
	sampleLag = 10 * time.Second
	// sampleCatchUp bounds how many missed minutes one round samples (after a restart).
	sampleCatchUp = 10
	// sampleRetention is how long samples are kept: the day chart and a day before it.
	sampleRetention = 48 * time.Hour
	// sampleTimeout bounds one round.
	sampleTimeout = 20 * time.Second
	// sampleSize bounds the rows a minute's sample reads beyond the log's minute, per flow:
	// the latencies are those of at most sampleSize finished operations (one primary-key read
	// of operations each), the redeliveries are looked for among at most sampleSize request
	// events (one index probe of the log each), both drawn uniformly at random and scaled up
	// to the minute's count; all of them when there are no more. The counts are exact.
	sampleSize = 1000
)

// FlowSample is one flow's minute.
type FlowSample struct {
	Minute time.Time
	Flow   string
	// Waiting and Running are the flow's tasks pending and running when the minute was
	// sampled (just after it ended); QueueWaiting the jobs waiting in its queue then (nil:
	// not read, e.g. QUEUE_TRANSPORT=memory).
	Waiting, Running int64
	QueueWaiting     *int64
	// Accepted, Succeeded and Failed count operations of the flow committed in the minute.
	Accepted, Succeeded, Failed int64
	// Delivered counts the flow's request events delivered to its queue in the minute; of
	// those, Redelivered a task's second or later delivery, LastLooks the last looks.
	Delivered, Redelivered, LastLooks int64
	// RedeliveredSample, when set, is the number of request events Redelivered was estimated
	// from (the redeliveries found among them, scaled up to the minute's request events
	// other than last looks, rounded); nil: every request event was looked at (exact).
	RedeliveredSample *int64
	// Commit → job start and commit → finish of the operations finished in the minute, in
	// seconds (nil: none finished).
	StartP50, StartP99, FinishP50, FinishP99 *float64
	// LatencySample, when set, is the number of finished operations (drawn at random) the
	// percentiles are from; nil: all of them.
	LatencySample *int64
}

// OutboxSample is the outbox's minute.
type OutboxSample struct {
	Minute time.Time
	// Owed counts events pending or being dispatched when the minute was sampled; OldestOwed
	// is the oldest one's age then (0: none).
	Owed       int64
	OldestOwed time.Duration
	// Delivered counts events delivered in the minute.
	Delivered int64
}

// RunSampler samples every minute, sampleLag after it ends, until ctx ends; a round that
// fails is logged and the next one tries again (up to sampleCatchUp missed minutes are
// sampled then). Several consoles on one database may run it: a minute already sampled is
// left as it is. Returns nil when ctx ends.
func (s *Server) RunSampler(ctx context.Context) error {
	for {
		now := s.now()
		if err := s.Sample(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("console: overview sample", "err", err)
		}
		next := now.Truncate(time.Minute).Add(time.Minute + sampleLag)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Sample samples the minutes ended sampleLag before now (Config.Now) and not sampled yet (at
// most the last ten), then deletes samples older than two days. RunSampler calls it every
// minute; it is safe to call at any time, from several consoles at once.
func (s *Server) Sample(ctx context.Context) error {
	now := s.now()
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	last := now.Add(-time.Minute - sampleLag).Truncate(time.Minute)
	var latest *time.Time
	if err := s.cfg.Pool.QueryRow(ctx, `SELECT max(minute) FROM overview_outbox_samples`).Scan(&latest); err != nil {
		return fmt.Errorf("console.sample: %w", err)
	}
	first := last.Add(-(sampleCatchUp - 1) * time.Minute)
	if latest != nil && latest.Add(time.Minute).After(first) {
		first = latest.Add(time.Minute)
	}
	if !first.After(last) {
		// A minute's read of the log is as tight as its BRIN index is summarized (sql/054);
		// a round that cannot summarize (a VACUUM holds the partition) reads all the same.
		if _, err := s.cfg.Pool.Exec(ctx, `SELECT overview_summarize_log()`); err != nil {
			s.log.Warn("console: overview sample: log index not summarized", "err", err)
		}
	}
	for m := first; !m.After(last); m = m.Add(time.Minute) {
		if err := s.sampleMinute(ctx, m); err != nil {
			return err
		}
	}
	if _, err := s.cfg.Pool.Exec(ctx, `DELETE FROM overview_flow_samples WHERE minute < $1`, now.Add(-sampleRetention)); err != nil {
		return fmt.Errorf("console.sample: retention: %w", err)
	}
	if _, err := s.cfg.Pool.Exec(ctx, `DELETE FROM overview_outbox_samples WHERE minute < $1`, now.Add(-sampleRetention)); err != nil {
		return fmt.Errorf("console.sample: retention: %w", err)
	}
	return nil
}

// sampleMinute reads minute m (its start) and writes its rows in one transaction.
func (s *Server) sampleMinute(ctx context.Context, m time.Time) error {
	flows, out, err := s.readSample(ctx, m)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	for _, f := range flows {
		b.Queue(`INSERT INTO overview_flow_samples (minute, flow, waiting, running, queue_waiting, accepted, succeeded, failed,
				delivered, redelivered, last_looks, start_p50, start_p99, finish_p50, finish_p99, latency_sample, redelivered_sample)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) ON CONFLICT DO NOTHING`,
			f.Minute, f.Flow, f.Waiting, f.Running, f.QueueWaiting, f.Accepted, f.Succeeded, f.Failed,
			f.Delivered, f.Redelivered, f.LastLooks, f.StartP50, f.StartP99, f.FinishP50, f.FinishP99, f.LatencySample, f.RedeliveredSample)
	}
	var oldest *float64
	if out.Owed > 0 {
		v := out.OldestOwed.Seconds()
		oldest = &v
	}
	b.Queue(`INSERT INTO overview_outbox_samples (minute, owed, oldest_owed_seconds, delivered) VALUES ($1, $2, $3, $4)
		ON CONFLICT DO NOTHING`, out.Minute, out.Owed, oldest, out.Delivered)
	if err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }); err != nil {
		return fmt.Errorf("console.sample %s: %w", m.Format(time.RFC3339), err)
	}
	return nil
}

// readSample reads minute m: the log's minute, the tasks and the outbox now, and the queues'
// waiting jobs (Redis) now.
func (s *Server) readSample(ctx context.Context, m time.Time) ([]FlowSample, OutboxSample, error) {
	end := m.Add(time.Minute)
	tasks, err := s.data.overviewTasks(ctx, end.Add(-time.Hour))
	if err != nil {
		return nil, OutboxSample{}, err
	}
	requests := make([]string, 0, len(s.cfg.Flows))
	for _, f := range s.cfg.Flows {
		requests = append(requests, f.RequestEvent)
	}
	ops, deliveries, err := s.data.overviewMinute(ctx, m, end, end.Add(sampleLag), requests, sampleSize)
	if err != nil {
		return nil, OutboxSample{}, err
	}
	out := OutboxSample{Minute: m}
	for _, d := range deliveries {
		out.Delivered += d.delivered
	}
	if out.Owed, out.OldestOwed, err = s.data.owed(ctx, s.now()); err != nil {
		return nil, OutboxSample{}, err
	}
	flows := make([]FlowSample, 0, len(s.cfg.Flows))
	for _, f := range s.cfg.Flows {
		x := FlowSample{Minute: m, Flow: f.Name}
		if t, ok := tasks[f.Table]; ok {
			x.Waiting, x.Running = t.Pending, t.Running
		}
		if o, ok := ops[f.Operation]; ok {
			x.Accepted, x.Succeeded, x.Failed = o.accepted, o.succeeded, o.failed
			x.StartP50, x.StartP99, x.FinishP50, x.FinishP99 = o.startP50, o.startP99, o.finishP50, o.finishP99
			if o.sampled < o.succeeded+o.failed {
				x.LatencySample = &o.sampled
			}
		}
		if d, ok := deliveries[f.Queue]; ok {
			x.Delivered, x.LastLooks = d.delivered, d.lastLooks
			x.Redelivered, x.RedeliveredSample = d.redeliveries()
		}
		if s.cfg.BullMQ.Client != nil {
			if n, err := queueWaiting(ctx, s.cfg.BullMQ, f.Queue); err == nil {
				x.QueueWaiting = &n
			} else {
				s.log.Warn("console: overview sample: queue not read", "queue", f.Queue, "err", err)
			}
		}
		flows = append(flows, x)
	}
	return flows, out, nil
}

// queueWaiting is the jobs of queue waiting to be taken: waiting and prioritized (not delayed:
// those wait for a backoff or a snooze).
func queueWaiting(ctx context.Context, cfg bullmq.Config, queue string) (int64, error) {
	c, err := bullmq.QueueCounts(ctx, cfg, queue)
	if err != nil {
		return 0, err
	}
	return c[bullmq.StateWaiting] + c[bullmq.StatePrioritized], nil
}

// TaskLoad is one task table now: its tasks pending and running, the oldest pending one's
// last move, and its failures since the asked time.
type TaskLoad struct {
	Pending, Running, Failed int64
	OldestPendingAt          *time.Time
}

func (r reader) overviewTasks(ctx context.Context, failedSince time.Time) (map[string]TaskLoad, error) {
	rows, err := r.pool.Query(ctx, `SELECT task_table, pending, running, oldest_pending_at, failed FROM operator_overview_tasks($1)`, failedSince)
	if err != nil {
		return nil, fmt.Errorf("console.overviewTasks: %w", err)
	}
	out := map[string]TaskLoad{}
	var table string
	var t TaskLoad
	_, err = pgx.ForEachRow(rows, []any{&table, &t.Pending, &t.Running, &t.OldestPendingAt, &t.Failed}, func() error {
		out[table] = t
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console.overviewTasks: %w", err)
	}
	return out, nil
}

// opMinute is one operation type's minute: its percentiles are those of sampled of its
// finished operations.
type opMinute struct {
	accepted, succeeded, failed, sampled     int64
	startP50, startP99, finishP50, finishP99 *float64
}

// destMinute is one destination's minute: of its requests (request events other than last
// looks), probed were looked at and redelivered of those found to be redeliveries.
type destMinute struct{ delivered, lastLooks, requests, probed, redelivered int64 }

// redeliveries returns the minute's redeliveries: those found when every request was
// probed (sample nil), else those found scaled up to the requests, rounded, and the number
// probed.
func (d destMinute) redeliveries() (n int64, sample *int64) {
	if d.probed >= d.requests || d.probed == 0 {
		return d.redelivered, nil
	}
	probed := d.probed
	return int64(math.Round(float64(d.redelivered) * float64(d.requests) / float64(d.probed))), &probed
}

// overviewMinute reads the log's events delivered in [from, until) once
// (operator_overview_minute): per operation type those committed in [from, to), per
// destination those delivered in [from, to), the latencies and the redeliveries from samples of
// at most sample each.
func (r reader) overviewMinute(ctx context.Context, from, to, until time.Time, requestTypes []string, sample int) (map[string]opMinute, map[string]destMinute, error) {
	rows, err := r.pool.Query(ctx, `SELECT kind, name, accepted, succeeded, failed, sampled, start_p50, start_p99, finish_p50, finish_p99,
			delivered, last_looks, requests, probed, redelivered
		FROM operator_overview_minute($1, $2, $3, $4, $5)`, from, to, until, requestTypes, sample)
	if err != nil {
		return nil, nil, fmt.Errorf("console.overviewMinute: %w", err)
	}
	ops, dests := map[string]opMinute{}, map[string]destMinute{}
	var kind string
	var name *string
	var o struct{ accepted, succeeded, failed, sampled *int64 }
	var op opMinute
	var d struct{ delivered, lastLooks, requests, probed, redelivered *int64 }
	_, err = pgx.ForEachRow(rows, []any{&kind, &name, &o.accepted, &o.succeeded, &o.failed, &o.sampled,
		&op.startP50, &op.startP99, &op.finishP50, &op.finishP99, &d.delivered, &d.lastLooks, &d.requests, &d.probed, &d.redelivered},
		func() error {
			switch {
			case name == nil: // an operation.status_changed without a type
			case kind == "operation":
				op.accepted, op.succeeded, op.failed, op.sampled = *o.accepted, *o.succeeded, *o.failed, *o.sampled
				ops[*name] = op
			case kind == "destination":
				dests[*name] = destMinute{delivered: *d.delivered, lastLooks: *d.lastLooks, requests: *d.requests,
					probed: *d.probed, redelivered: *d.redelivered}
			}
			return nil
		})
	if err != nil {
		return nil, nil, fmt.Errorf("console.overviewMinute: %w", err)
	}
	return ops, dests, nil
}

// owed is the outbox's events pending or being dispatched at now, and the oldest one's age.
func (r reader) owed(ctx context.Context, now time.Time) (int64, time.Duration, error) {
	rows, err := r.pool.Query(ctx, `SELECT status, events, oldest_created_at FROM outbox_stats($1)`, now)
	if err != nil {
		return 0, 0, fmt.Errorf("console.owed: %w", err)
	}
	var n int64
	var oldest time.Duration
	var status string
	var events int64
	var at *time.Time
	_, err = pgx.ForEachRow(rows, []any{&status, &events, &at}, func() error {
		if status != outbox.StatusPending && status != outbox.StatusDispatching {
			return nil
		}
		n += events
		if at != nil && now.Sub(*at) > oldest {
			oldest = now.Sub(*at)
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("console.owed: %w", err)
	}
	return n, oldest, nil
}

// flowSamples reads the flow samples of minutes in [from, to), oldest first.
func (r reader) flowSamples(ctx context.Context, from, to time.Time) ([]FlowSample, error) {
	rows, err := r.pool.Query(ctx, `SELECT minute, flow, waiting, running, queue_waiting, accepted, succeeded, failed,
			delivered, redelivered, last_looks, start_p50, start_p99, finish_p50, finish_p99, latency_sample, redelivered_sample
		FROM overview_flow_samples WHERE minute >= $1 AND minute < $2 ORDER BY minute, flow`, from, to)
	if err != nil {
		return nil, fmt.Errorf("console.flowSamples: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FlowSample, error) {
		var f FlowSample
		var p50, p99, f50, f99 *float32
		err := row.Scan(&f.Minute, &f.Flow, &f.Waiting, &f.Running, &f.QueueWaiting, &f.Accepted, &f.Succeeded, &f.Failed,
			&f.Delivered, &f.Redelivered, &f.LastLooks, &p50, &p99, &f50, &f99, &f.LatencySample, &f.RedeliveredSample)
		f.StartP50, f.StartP99, f.FinishP50, f.FinishP99 = widen(p50), widen(p99), widen(f50), widen(f99)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("console.flowSamples: %w", err)
	}
	return out, nil
}

// outboxSamples reads the outbox samples of minutes in [from, to), oldest first.
func (r reader) outboxSamples(ctx context.Context, from, to time.Time) ([]OutboxSample, error) {
	rows, err := r.pool.Query(ctx, `SELECT minute, owed, oldest_owed_seconds, delivered FROM overview_outbox_samples
		WHERE minute >= $1 AND minute < $2 ORDER BY minute`, from, to)
	if err != nil {
		return nil, fmt.Errorf("console.outboxSamples: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxSample, error) {
		var o OutboxSample
		var oldest *float32
		err := row.Scan(&o.Minute, &o.Owed, &oldest, &o.Delivered)
		if oldest != nil {
			o.OldestOwed = time.Duration(float64(*oldest) * float64(time.Second))
		}
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("console.outboxSamples: %w", err)
	}
	return out, nil
}

func widen(v *float32) *float64 {
	if v == nil {
		return nil
	}
	x := float64(*v)
	return &x
}
