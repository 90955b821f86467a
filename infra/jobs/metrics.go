package jobs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/metrics"
)

// Outcomes of a job attempt, the values of listing_jobs_total's outcome label.
const (
	// OutcomeCompleted: the handler returned nil; the job completes.
	OutcomeCompleted = "completed"
	// OutcomeRetry: the handler failed and attempts remain; BullMQ retries with the backoff.
	OutcomeRetry = "retry"
	// OutcomeFailed: a worker.Permanent error, a failure on the last attempt, or job data
	// that is not a job envelope; the job fails for good.
	OutcomeFailed = "failed"
	// OutcomeSnoozed: an upstream asked to wait (Retry-After); the job is delivered again
	// after that delay without spending an attempt.
	OutcomeSnoozed = "snoozed"
)

// Metrics are the job consumers' Prometheus collectors, updated when a handler returns
// (before BullMQ settles the job in Redis). An attempt interrupted by shutdown and handed
// back to the queue is observed in Duration but not counted in Jobs.
type Metrics struct {
	// Jobs is listing_jobs_total{queue, outcome}: job attempts by outcome (OutcomeCompleted,
	// OutcomeRetry, OutcomeSnoozed, OutcomeFailed).
	Jobs *prometheus.CounterVec
	// Duration is listing_job_duration_seconds{queue}: handler time of each attempt.
	Duration *prometheus.HistogramVec
	// Wait is listing_job_wait_seconds{queue}: from enqueue to the start of a job's first
	// attempt.
	Wait *prometheus.HistogramVec
}

// NewMetrics creates the collectors and registers them on reg (nil: not registered). A
// collector already registered on reg (by another Runner) is reused.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "listing_jobs_total", Help: "Job attempts by queue and outcome (completed, retry, snoozed, failed).",
		}, []string{"queue", "outcome"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "listing_job_duration_seconds",
			Help:    "Handler time of one job attempt.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"queue"}),
		Wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "listing_job_wait_seconds",
			Help:    "Time from a job's enqueue to the start of its first attempt.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}, []string{"queue"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.Jobs = metrics.Register(reg, m.Jobs, &err)
	m.Duration = metrics.Register(reg, m.Duration, &err)
	m.Wait = metrics.Register(reg, m.Wait, &err)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// initQueue makes the series of queue visible at zero before its first job.
func (m *Metrics) initQueue(queue string) {
	for _, o := range []string{OutcomeCompleted, OutcomeRetry, OutcomeSnoozed, OutcomeFailed} {
		m.Jobs.WithLabelValues(queue, o)
	}
	m.Duration.WithLabelValues(queue)
	m.Wait.WithLabelValues(queue)
}

// QueueScrapeTimeout bounds the Redis reads of one scrape of a QueueCollector.
const QueueScrapeTimeout = 2 * time.Second

var (
	queueJobsDesc = prometheus.NewDesc("listing_job_queue_jobs",
		"BullMQ jobs in each state of a queue, read from Redis at scrape time.", []string{"queue", "state"}, nil)
	queueOldestDesc = prometheus.NewDesc("listing_job_queue_oldest_waiting_seconds",
		"Age of the job that has waited longest in a queue's wait list (0: none waits), read at scrape time.", []string{"queue"}, nil)
)

// QueueCollector is a prometheus.Collector of listing_job_queue_jobs{queue, state}, the
// number of jobs in each bullmq.JobStates state of its queues, and of
// listing_job_queue_oldest_waiting_seconds{queue}, read from Redis at scrape
// time (one round trip per queue, the queues read concurrently, all within
// QueueScrapeTimeout). A queue whose read fails is left out of that scrape and logged at
// warning level with the queue name and the Redis error; the scrape itself succeeds. Safe
// for concurrent use.
type QueueCollector struct {
	cfg    bullmq.Config
	queues []string
	log    *slog.Logger
}

// NewQueueCollector returns a collector of queues on cfg.Client under cfg.Prefix. log
// receives the failed reads (default slog.Default()).
func NewQueueCollector(cfg bullmq.Config, queues []string, log *slog.Logger) *QueueCollector {
	if log == nil {
		log = slog.Default()
	}
	return &QueueCollector{cfg: cfg, queues: append([]string(nil), queues...), log: log}
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueJobsDesc
	ch <- queueOldestDesc
}

// Collect implements prometheus.Collector.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), QueueScrapeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, q := range c.queues {
		wg.Go(func() {
			counts, err := bullmq.QueueCounts(ctx, c.cfg, q)
			if err != nil {
				c.log.Warn("job queue depth not reported: reading Redis failed", "queue", q, "err", err)
				return
			}
			for _, state := range bullmq.JobStates() {
				ch <- prometheus.MustNewConstMetric(queueJobsDesc, prometheus.GaugeValue, float64(counts[state]), q, state)
			}
			age := 0.0
			if at, ok, err := bullmq.OldestWaiting(ctx, c.cfg, q); err != nil {
				c.log.Warn("oldest waiting job not reported: reading Redis failed", "queue", q, "err", err)
				return
			} else if ok {
				age = max(time.Since(at).Seconds(), 0)
			}
			ch <- prometheus.MustNewConstMetric(queueOldestDesc, prometheus.GaugeValue, age, q)
		})
	}
	wg.Wait()
}
