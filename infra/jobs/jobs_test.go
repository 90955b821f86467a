package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/jobs"
)

func redisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// bundle is a Redis client, a BullMQ prefix of its own (its keys deleted after the test),
// a publisher and a registry.
type bundle struct {
	rdb    *redis.Client
	bcfg   bullmq.Config
	pub    *bullmq.Publisher
	reg    *prometheus.Registry
	prefix string
}

func setup(t *testing.T) bundle {
	t.Helper()
	t.Parallel()
	if testing.Short() {
		t.Skip("needs Redis")
	}
	opt, err := redis.ParseURL(redisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	require.NoError(t, rdb.Ping(context.Background()).Err(), "Redis at %s", redisURL())
	prefix := "t" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	t.Cleanup(func() { deletePrefix(rdb, prefix) })
	// Two attempts, retried after 10 ms.
	bcfg := bullmq.Config{Client: rdb, Prefix: prefix, Attempts: 2, Backoff: bullmq.Backoff{Type: bullmq.BackoffFixed, Delay: 10}}
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bcfg}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return bundle{rdb: rdb, bcfg: bcfg, pub: pub, reg: prometheus.NewRegistry(), prefix: prefix}
}

// transport is a BullMQ transport on the bundle's queues, closed when t ends.
func (b bundle) transport(t *testing.T) jobs.BullMQ {
	t.Helper()
	tr, err := jobs.NewBullMQ(bullmq.SubscriberConfig{Config: b.bcfg, Concurrency: 4}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func deletePrefix(rdb *redis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
}

// add publishes one job per event type, as the outbox does: an envelope in a workspace.
func (b bundle) add(t *testing.T, queue string, eventTypes ...string) {
	t.Helper()
	js := make([]bullmq.Job, len(eventTypes))
	for i, et := range eventTypes {
		id := uuid.NewString()
		data, err := json.Marshal(worker.Envelope{EventID: id, WorkspaceID: uuid.NewString(), EventType: et,
			Payload: json.RawMessage(`{}`), OccurredAt: time.Now().UTC()})
		require.NoError(t, err)
		js[i] = bullmq.Job{ID: id, Name: et, Data: data}
	}
	_, err := b.pub.Add(context.Background(), queue, js)
	require.NoError(t, err)
}

func (b bundle) counts(t *testing.T, queue string) map[string]int64 {
	t.Helper()
	c, err := bullmq.QueueCounts(context.Background(), b.bcfg, queue)
	require.NoError(t, err)
	return c
}

// run runs r until the test ends.
func run(t *testing.T, r *jobs.Runner) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("runner did not stop")
		}
	})
}

// waitFor polls cond for up to 15 s; state, if given, says what was seen when it gives up.
func waitFor(t *testing.T, what string, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			seen := ""
			for _, s := range state {
				seen += " (" + s() + ")"
			}
			t.Fatalf("timed out waiting for %s%s", what, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// behave fails or succeeds by event type.
var behave = worker.HandlerFunc(func(_ context.Context, j worker.Job) error {
	switch j.EventType {
	case "flaky": // fails once, then completes
		if j.Attempt == 1 {
			return errors.New("flaky: first attempt fails")
		}
	case "always":
		return errors.New("always fails")
	case "permanent":
		return worker.Permanent(errors.New("cannot be fixed"))
	case "panic":
		panic("handler bug")
	case "snooze": // snoozed once, then completes
		if j.Snoozes == 0 {
			return &worker.SnoozeError{Delay: 300 * time.Millisecond, Err: errors.New("429")}
		}
	}
	return nil
})

// histogramCount is the number of observations of listing_job_duration_seconds{queue}.
func histogramCount(t *testing.T, reg prometheus.Gatherer, queue string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "listing_job_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == queue {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func TestRunnerMetrics(t *testing.T) {
	b := setup(t)
	q, idle := "jobs-a", "jobs-idle"
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	r, err := jobs.NewRunner(jobs.Config{Transport: b.transport(t), Concurrency: 4, Logger: log, Registerer: b.reg,
		Handlers: map[string]worker.Handler{q: behave, idle: behave}})
	require.NoError(t, err)

	// Before any job: every series at zero, and the queue gauges of both queues.
	m, err := jobs.NewMetrics(b.reg) // the Runner's collectors, shared through the registry
	require.NoError(t, err)
	for _, o := range []string{jobs.OutcomeCompleted, jobs.OutcomeRetry, jobs.OutcomeFailed} {
		assert.Zero(t, testutil.ToFloat64(m.Jobs.WithLabelValues(q, o)), o)
	}
	assert.Equal(t, 2*len(bullmq.JobStates()), testutil.CollectAndCount(b.reg, "listing_job_queue_jobs"))

	// A job whose data is not an envelope fails without running the handler.
	_, err = b.pub.Add(context.Background(), q, []bullmq.Job{{ID: uuid.NewString(), Name: "bad", Data: []byte(`"not an envelope"`)}})
	require.NoError(t, err)
	b.add(t, q, "ok", "ok", "flaky", "always", "permanent", "panic", "snooze")
	run(t, r)
	var c map[string]int64
	waitFor(t, "8 finished jobs", func() bool {
		c = b.counts(t, q)
		return c[bullmq.StateCompleted]+c[bullmq.StateFailed] == 8
	}, func() string { return fmt.Sprint(c) })

	// completed: ok ×2, flaky's second attempt, snooze's second delivery. retry: the first
	// attempts of flaky, always and panic. snoozed: snooze's first delivery. failed: bad
	// envelope, permanent, the last attempts of always and panic.
	assert.Equal(t, 4.0, testutil.ToFloat64(m.Jobs.WithLabelValues(q, jobs.OutcomeCompleted)), "completed")
	assert.Equal(t, 3.0, testutil.ToFloat64(m.Jobs.WithLabelValues(q, jobs.OutcomeRetry)), "retry")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.Jobs.WithLabelValues(q, jobs.OutcomeSnoozed)), "snoozed")
	assert.Equal(t, 4.0, testutil.ToFloat64(m.Jobs.WithLabelValues(q, jobs.OutcomeFailed)), "failed")
	// The handler ran 11 times: ok ×2, flaky ×2, always ×2, permanent ×1, panic ×2, snooze ×2.
	assert.Equal(t, uint64(11), histogramCount(t, b.reg, q))
	assert.Zero(t, histogramCount(t, b.reg, idle))
	assert.Zero(t, testutil.ToFloat64(m.Jobs.WithLabelValues(idle, jobs.OutcomeCompleted)))

	require.NoError(t, testutil.GatherAndCompare(b.reg, strings.NewReader(`
# HELP listing_job_queue_jobs BullMQ jobs in each state of a queue, read from Redis at scrape time.
# TYPE listing_job_queue_jobs gauge
listing_job_queue_jobs{queue="jobs-a",state="active"} 0
listing_job_queue_jobs{queue="jobs-a",state="completed"} 4
listing_job_queue_jobs{queue="jobs-a",state="delayed"} 0
listing_job_queue_jobs{queue="jobs-a",state="failed"} 4
listing_job_queue_jobs{queue="jobs-a",state="prioritized"} 0
listing_job_queue_jobs{queue="jobs-a",state="waiting"} 0
listing_job_queue_jobs{queue="jobs-a",state="waiting-children"} 0
listing_job_queue_jobs{queue="jobs-idle",state="active"} 0
listing_job_queue_jobs{queue="jobs-idle",state="completed"} 0
listing_job_queue_jobs{queue="jobs-idle",state="delayed"} 0
listing_job_queue_jobs{queue="jobs-idle",state="failed"} 0
listing_job_queue_jobs{queue="jobs-idle",state="prioritized"} 0
listing_job_queue_jobs{queue="jobs-idle",state="waiting"} 0
listing_job_queue_jobs{queue="jobs-idle",state="waiting-children"} 0
`), "listing_job_queue_jobs"))

	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	assert.Contains(t, out, "handler bug", "a panic is logged as the attempt's error")
}

// The queue gauge follows the queue: jobs waiting while no Runner consumes them.
func TestQueueCollectorWaiting(t *testing.T) {
	b := setup(t)
	b.add(t, "jobs-w", "ok", "ok", "ok")
	c := jobs.NewQueueCollector(b.bcfg, []string{"jobs-w"}, nil)
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP listing_job_queue_jobs BullMQ jobs in each state of a queue, read from Redis at scrape time.
# TYPE listing_job_queue_jobs gauge
listing_job_queue_jobs{queue="jobs-w",state="active"} 0
listing_job_queue_jobs{queue="jobs-w",state="completed"} 0
listing_job_queue_jobs{queue="jobs-w",state="delayed"} 0
listing_job_queue_jobs{queue="jobs-w",state="failed"} 0
listing_job_queue_jobs{queue="jobs-w",state="prioritized"} 0
listing_job_queue_jobs{queue="jobs-w",state="waiting"} 3
listing_job_queue_jobs{queue="jobs-w",state="waiting-children"} 0
`), "listing_job_queue_jobs"))
	time.Sleep(50 * time.Millisecond)
	age := 0.0
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	got, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range got {
		if mf.GetName() == "listing_job_queue_oldest_waiting_seconds" {
			age = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	assert.GreaterOrEqual(t, age, 0.05, "the oldest waiting job's age")
}

// A queue Redis cannot be read for is left out of the scrape, which still succeeds, and the
// log line names the queue but not the Redis password.
func TestQueueCollectorRedisDown(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Password: "s3cret-pw", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(jobs.NewQueueCollector(bullmq.Config{Client: down, Prefix: "tdown"}, []string{"jobs-down"}, log))
	start := time.Now()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	assert.Empty(t, mfs)
	assert.Less(t, time.Since(start), jobs.QueueScrapeTimeout+time.Second)
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	assert.Contains(t, out, "jobs-down")
	assert.NotContains(t, out, "s3cret-pw")
}

// Two Runners on one registry share the metrics.
func TestRunnersShareRegistry(t *testing.T) {
	b := setup(t)
	h := map[string]worker.Handler{"jobs-s": behave}
	_, err := jobs.NewRunner(jobs.Config{Transport: b.transport(t), Handlers: h, Registerer: b.reg})
	require.NoError(t, err)
	_, err = jobs.NewRunner(jobs.Config{Transport: b.transport(t), Handlers: h, Registerer: b.reg})
	require.NoError(t, err)
	_, err = jobs.NewRunner(jobs.Config{Transport: b.transport(t), Handlers: h}) // no registry
	require.NoError(t, err)
	assert.Equal(t, len(bullmq.JobStates()), testutil.CollectAndCount(b.reg, "listing_job_queue_jobs"))
	assert.Equal(t, 4, testutil.CollectAndCount(b.reg, "listing_jobs_total"))
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
