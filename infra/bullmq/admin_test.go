package bullmq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
)

// Failed jobs are listed with their reasons; retry sends one back to wait with its attempts
// reset and a worker then completes it; remove deletes one with its dedup key; both refuse
// jobs that are not failed or do not exist. OldestWaiting reads the wait list's tail.
func TestFailedJobsRetryRemove(t *testing.T) {
	b := setupCounts(t)
	ctx := context.Background()

	// The first two jobs fail unrecoverably on their first run and succeed on the next; the
	// others succeed.
	var mu sync.Mutex
	runs := map[string]int{}
	handler := func(ctx context.Context, j *bullmq.Job) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		runs[j.ID]++
		if runs[j.ID] == 1 && runs["first two"] < 2 {
			runs["first two"]++
			return nil, bullmq.Unrecoverable(fmt.Errorf("store %s: platform said no", j.ID))
		}
		return "ok", nil
	}
	newWorker := func() *bullmq.Worker {
		w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: b.cfg, Queue: b.queue, DrainDelay: 100 * time.Millisecond,
			ShutdownTimeout: 100 * time.Millisecond, Logger: testLogger{t}}, handler)
		require.NoError(t, err)
		return w
	}
	opts := func(id string) *bullmq.JobOptions {
		return &bullmq.JobOptions{Attempts: 3, Deduplication: &bullmq.Deduplication{ID: id, TTL: time.Hour.Milliseconds()}}
	}
	a, c := job(behaviour{}, nil), job(behaviour{}, nil)
	a.Opts, c.Opts = opts(a.ID), opts(c.ID)
	b.add(t, a, c)
	stop := runWorker(t, newWorker())
	waitFor(t, 10*time.Second, "2 failed", func() bool { return b.counts(t)[bullmq.StateFailed] == 2 })
	stop()

	failed, err := bullmq.FailedJobs(ctx, b.cfg, b.queue, 10)
	require.NoError(t, err)
	require.Len(t, failed, 2)
	require.ElementsMatch(t, []string{a.ID, c.ID}, []string{failed[0].ID, failed[1].ID})
	for _, f := range failed {
		assert.Equal(t, "test.event", f.Name)
		assert.Equal(t, "store "+f.ID+": platform said no", f.FailedReason)
		assert.Equal(t, []string{f.FailedReason}, f.Stacktrace)
		assert.Equal(t, 1, f.AttemptsMade)
		assert.False(t, f.Timestamp.IsZero())
		assert.False(t, f.FinishedOn.Before(f.Timestamp))
	}
	one, err := bullmq.FailedJobs(ctx, b.cfg, b.queue, 1)
	require.NoError(t, err)
	require.Len(t, one, 1)

	// Nothing waits yet; then the first of two waiting jobs is the oldest.
	_, ok, err := bullmq.OldestWaiting(ctx, b.cfg, b.queue)
	require.NoError(t, err)
	require.False(t, ok)
	w1 := job(behaviour{}, nil)
	b.add(t, w1)
	time.Sleep(5 * time.Millisecond)
	b.add(t, job(behaviour{}, nil))
	oldest, ok, err := bullmq.OldestWaiting(ctx, b.cfg, b.queue)
	require.NoError(t, err)
	require.True(t, ok)
	ts, err := b.rdb.HGet(ctx, b.key(w1.ID), "timestamp").Int64()
	require.NoError(t, err)
	require.Equal(t, time.UnixMilli(ts), oldest)

	// Retry: back to wait, attempts reset, the marker set, a waiting event.
	require.NoError(t, b.rdb.Del(ctx, b.key("marker")).Err())
	require.NoError(t, bullmq.RetryJob(ctx, b.cfg, b.queue, a.ID))
	h, err := b.rdb.HGetAll(ctx, b.key(a.ID)).Result()
	require.NoError(t, err)
	assert.Equal(t, "0", h["atm"])
	assert.NotContains(t, h, "failedReason")
	assert.NotContains(t, h, "finishedOn")
	assert.Contains(t, h, "stacktrace", "the history stays")
	head, err := b.rdb.LIndex(ctx, b.key("wait"), 0).Result()
	require.NoError(t, err)
	assert.Equal(t, a.ID, head)
	_, err = b.rdb.ZScore(ctx, b.key("marker"), "0").Result()
	require.NoError(t, err, "the marker wakes idle workers")
	ev, err := b.rdb.XRevRangeN(ctx, b.key("events"), "+", "-", 1).Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"event": "waiting", "jobId": a.ID, "prev": "failed"}, ev[0].Values)
	require.ErrorIs(t, bullmq.RetryJob(ctx, b.cfg, b.queue, a.ID), bullmq.ErrJobNotFailed)
	require.ErrorIs(t, bullmq.RetryJob(ctx, b.cfg, b.queue, "no-such-job"), bullmq.ErrJobNotFound)

	// Remove: hash, failed membership and dedup key gone, a removed event; a waiting job is
	// refused.
	require.Equal(t, int64(1), b.rdb.Exists(ctx, b.key("de:"+c.ID)).Val(), "published with a dedup key")
	require.NoError(t, bullmq.RemoveJob(ctx, b.cfg, b.queue, c.ID))
	assert.Zero(t, b.rdb.Exists(ctx, b.key(c.ID), b.key("de:"+c.ID)).Val())
	_, err = b.rdb.ZScore(ctx, b.key("failed"), c.ID).Result()
	require.ErrorIs(t, err, redis.Nil)
	ev, err = b.rdb.XRevRangeN(ctx, b.key("events"), "+", "-", 1).Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"event": "removed", "jobId": c.ID, "prev": "failed"}, ev[0].Values)
	require.ErrorIs(t, bullmq.RemoveJob(ctx, b.cfg, b.queue, c.ID), bullmq.ErrJobNotFound)
	require.ErrorIs(t, bullmq.RemoveJob(ctx, b.cfg, b.queue, w1.ID), bullmq.ErrJobNotFailed)
	assert.Equal(t, int64(1), b.rdb.Exists(ctx, b.key(w1.ID)).Val())

	// A worker completes the retried job (its second run succeeds) and the two waiting ones.
	runWorker(t, newWorker())
	waitFor(t, 10*time.Second, "3 completed", func() bool {
		c := b.counts(t)
		return c[bullmq.StateCompleted] == 3 && c[bullmq.StateFailed] == 0
	})
	mu.Lock()
	assert.Equal(t, 2, runs[a.ID])
	mu.Unlock()
}

func TestAdminErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := bullmq.FailedJobs(ctx, bullmq.Config{}, "q", 1)
	require.ErrorContains(t, err, "Client is required")
	rdb := newRedis(t)
	_, err = bullmq.FailedJobs(ctx, bullmq.Config{Client: rdb}, "", 1)
	require.ErrorContains(t, err, "queue is required")
	err = bullmq.RetryJob(ctx, bullmq.Config{}, "q", "1")
	require.ErrorContains(t, err, "Client is required")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = bullmq.RemoveJob(cctx, bullmq.Config{Client: rdb}, "q", "x")
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}

// A consumer's nack reason (MetadataNackReason) is the failed job's failedReason and the last
// line of its stack, where operators read it; without one the job says "message nacked".
func TestNackReasonIsTheFailedReason(t *testing.T) {
	b := setupCounts(t)
	ctx := context.Background()
	sub, err := bullmq.NewSubscriber(bullmq.SubscriberConfig{Config: b.cfg, DrainDelay: 100 * time.Millisecond,
		ShutdownTimeout: time.Second}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	subCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(subCtx, b.queue)
	require.NoError(t, err)

	reasoned, plain := job(behaviour{}, nil), job(behaviour{}, nil)
	b.add(t, reasoned, plain)
	for range 2 {
		select {
		case msg := <-msgs:
			msg.Metadata.Set(bullmq.MetadataNack, bullmq.NackFail)
			if msg.UUID == reasoned.ID {
				msg.Metadata.Set(bullmq.MetadataNackReason, "PLATFORM_UNAVAILABLE: the marketplace is unavailable")
			}
			msg.Nack()
		case <-time.After(10 * time.Second):
			t.Fatal("no message")
		}
	}
	waitFor(t, 10*time.Second, "2 failed", func() bool { return b.counts(t)[bullmq.StateFailed] == 2 })
	failed, err := bullmq.FailedJobs(ctx, b.cfg, b.queue, 10)
	require.NoError(t, err)
	reasons := map[string][]string{}
	for _, f := range failed {
		reasons[f.ID] = append([]string{f.FailedReason}, f.Stacktrace...)
	}
	require.Equal(t, map[string][]string{
		reasoned.ID: {"PLATFORM_UNAVAILABLE: the marketplace is unavailable", "PLATFORM_UNAVAILABLE: the marketplace is unavailable"},
		plain.ID:    {"message nacked", "message nacked"},
	}, reasons)
}
