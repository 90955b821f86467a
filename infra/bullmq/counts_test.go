package bullmq_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
)

// countsBundle is a queue under a prefix of its own, with a publisher.
type countsBundle struct {
	rdb    *redis.Client
	cfg    bullmq.Config
	queue  string
	pub    *bullmq.Publisher
	prefix string
}

func setupCounts(t *testing.T) countsBundle {
	t.Helper()
	t.Parallel()
	rdb := newRedis(t)
	prefix := "t" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	q := newQueue(t, rdb, prefix)
	cfg := bullmq.Config{Client: rdb, Prefix: prefix}
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: cfg}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return countsBundle{rdb: rdb, cfg: cfg, queue: q, pub: pub, prefix: prefix}
}

func (b countsBundle) key(s string) string { return b.prefix + ":" + b.queue + ":" + s }

func (b countsBundle) add(t *testing.T, jobs ...bullmq.Job) {
	t.Helper()
	_, err := b.pub.Add(context.Background(), b.queue, jobs)
	require.NoError(t, err)
}

func (b countsBundle) counts(t *testing.T) map[string]int64 {
	t.Helper()
	c, err := bullmq.QueueCounts(context.Background(), b.cfg, b.queue)
	require.NoError(t, err)
	return c
}

// countsOf returns the counts of every state, zero for those not in m.
func countsOf(m map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for _, s := range bullmq.JobStates() {
		out[s] = m[s]
	}
	return out
}

// roundTrips counts the commands and pipelines a client sends.
type roundTrips struct{ cmds, pipelines atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.cmds.Add(1); return next(ctx, cmd) }
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.pipelines.Add(1); return next(ctx, cmds) }
}

func TestQueueCounts(t *testing.T) {
	b := setupCounts(t)
	ctx := context.Background()

	empty := b.counts(t)
	assert.Equal(t, countsOf(nil), empty, "an unknown queue has every state at zero")
	assert.Len(t, empty, len(bullmq.JobStates()))

	// completed ×2, failed ×1 (unrecoverable), delayed ×1 (retry in a minute).
	b.add(t,
		job(behaviour{}, nil),
		job(behaviour{}, nil),
		job(behaviour{Behave: "unrecoverable"}, &bullmq.JobOptions{Attempts: 3}),
		job(behaviour{Behave: "fail"}, &bullmq.JobOptions{Attempts: 2, Backoff: &bullmq.Backoff{Type: bullmq.BackoffFixed, Delay: 60_000}}),
	)
	started := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	handler := behaveHandler(nil)
	w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: b.cfg, Queue: b.queue, Concurrency: 1,
		DrainDelay: 100 * time.Millisecond, ShutdownTimeout: 100 * time.Millisecond, Logger: testLogger{t}},
		func(ctx context.Context, j *bullmq.Job) (any, error) {
			var d behaviour
			_ = json.Unmarshal(j.Data, &d)
			if d.Behave == "block" {
				close(started)
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return nil, nil
			}
			return handler(ctx, j)
		})
	require.NoError(t, err)
	stop := runWorker(t, w)
	waitFor(t, 10*time.Second, "2 completed, 1 failed, 1 delayed", func() bool {
		c := b.counts(t)
		return c[bullmq.StateCompleted] == 2 && c[bullmq.StateFailed] == 1 && c[bullmq.StateDelayed] == 1
	})

	// active ×1: the worker (concurrency 1) holds a job, so the next 3 stay in wait.
	b.add(t, job(behaviour{Behave: "block"}, nil))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking job did not start")
	}
	b.add(t, job(behaviour{}, nil), job(behaviour{}, nil), job(behaviour{}, nil))

	// The Go publisher adds neither prioritized jobs nor flows: write those sets
	// directly (ids with no job hash; the busy worker does not take them).
	require.NoError(t, b.rdb.ZAdd(ctx, b.key("prioritized"),
		redis.Z{Score: 1<<32 + 1, Member: "p1"}, redis.Z{Score: 1<<32 + 2, Member: "p2"}).Err())
	require.NoError(t, b.rdb.ZAdd(ctx, b.key("waiting-children"), redis.Z{Score: 1, Member: "parent"}).Err())

	rt := &roundTrips{}
	b.rdb.AddHook(rt)
	got := b.counts(t)
	assert.Equal(t, map[string]int64{
		bullmq.StateWaiting:         3,
		bullmq.StateActive:          1,
		bullmq.StatePrioritized:     2,
		bullmq.StateDelayed:         1,
		bullmq.StateCompleted:       2,
		bullmq.StateFailed:          1,
		bullmq.StateWaitingChildren: 1,
	}, got)
	assert.Equal(t, int64(1), rt.pipelines.Load(), "one pipelined round trip")
	assert.Zero(t, rt.cmds.Load(), "no command outside the pipeline")

	// Stopping cuts the blocked job short (past ShutdownTimeout): it stays active, left to
	// its lock (never handed back while its work may still land).
	stop()
	got = b.counts(t)
	assert.Equal(t, int64(3), got[bullmq.StateWaiting])
	assert.Equal(t, int64(1), got[bullmq.StateActive])
}

func TestQueueCountsErrors(t *testing.T) {
	t.Parallel()
	_, err := bullmq.QueueCounts(context.Background(), bullmq.Config{}, "q")
	require.ErrorContains(t, err, "Client is required")

	rdb := newRedis(t)
	_, err = bullmq.QueueCounts(context.Background(), bullmq.Config{Client: rdb}, "")
	require.ErrorContains(t, err, "queue is required")

	// A key of the wrong type fails the call.
	prefix := "t" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	q := newQueue(t, rdb, prefix)
	require.NoError(t, rdb.Set(context.Background(), prefix+":"+q+":wait", "x", time.Minute).Err())
	_, err = bullmq.QueueCounts(context.Background(), bullmq.Config{Client: rdb, Prefix: prefix}, q)
	require.ErrorContains(t, err, "WRONGTYPE")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = bullmq.QueueCounts(ctx, bullmq.Config{Client: rdb, Prefix: prefix}, q)
	require.ErrorIs(t, err, context.Canceled)
}

// QueueCounts agrees with Node.js BullMQ's Queue.getJobCounts on jobs Node.js
// adds with a priority and a delay, and on jobs the Go worker finished.
func TestQueueCountsMatchNode(t *testing.T) {
	b := setupCounts(t)
	requireNode(t)
	b.add(t, job(behaviour{}, nil), job(behaviour{Behave: "unrecoverable"}, nil))
	stop := runWorker(t, func() *bullmq.Worker {
		w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: b.cfg, Queue: b.queue, DrainDelay: 100 * time.Millisecond,
			Logger: testLogger{t}}, behaveHandler(nil))
		require.NoError(t, err)
		return w
	}())
	waitFor(t, 10*time.Second, "2 finished jobs", func() bool {
		c := b.counts(t)
		return c[bullmq.StateCompleted] == 1 && c[bullmq.StateFailed] == 1
	})
	stop()
	nodeAdd(t, b.prefix, b.queue, "add", []map[string]any{
		{"name": "n", "data": map[string]any{}, "opts": map[string]any{"priority": 3}},
		{"name": "n", "data": map[string]any{}, "opts": map[string]any{"priority": 1}},
		{"name": "n", "data": map[string]any{}, "opts": map[string]any{"delay": 60_000}},
		{"name": "n", "data": map[string]any{}},
	})
	b.add(t, job(behaviour{}, nil))

	node := report(t, b.prefix, b.queue, nil).Counts
	want := map[string]int64{}
	for _, s := range bullmq.JobStates() {
		want[s] = int64(node[s])
	}
	assert.Equal(t, map[string]int64{
		bullmq.StateWaiting: 2, bullmq.StateActive: 0, bullmq.StatePrioritized: 2, bullmq.StateDelayed: 1,
		bullmq.StateCompleted: 1, bullmq.StateFailed: 1, bullmq.StateWaitingChildren: 0,
	}, want, "Node.js getJobCounts")
	assert.Equal(t, want, b.counts(t))
}

// JobsUnfinished sees waiting and delayed jobs, not finished or missing ones.
func TestJobsUnfinished(t *testing.T) {
	b := setupCounts(t)
	ctx := context.Background()
	waiting, done, gone := uuid.NewString(), uuid.NewString(), uuid.NewString()
	b.add(t, bullmq.Job{ID: waiting, Name: "x", Data: []byte(`{}`)}, bullmq.Job{ID: done, Name: "x", Data: []byte(`{}`)})
	// done finished (as a finish script leaves it), gone never existed.
	require.NoError(t, b.rdb.HSet(ctx, b.key(done), "finishedOn", time.Now().UnixMilli()).Err())
	got, err := bullmq.JobsUnfinished(ctx, b.cfg, b.queue, []string{waiting, done, gone})
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{waiting: true, done: false, gone: false}, got)
}
