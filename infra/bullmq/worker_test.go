package bullmq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/internal/redistest"
	"github.com/listingkit/listing/internal/testwait"
)

// bundle is one queue under the default prefix "bull", on the single Redis (setup) or on
// the test binary's Redis Cluster with QueueHashTags (setupCluster).
type bundle struct {
	rdb   redis.UniversalClient
	queue string // the plain name; cfg.QueueName(queue) is its name in Redis
	pub   *bullmq.Publisher
	cfg   bullmq.Config
	// redis is where the Redis of the bundle is, for Node.js processes and Go children.
	redis redisTarget
}

func setup(t *testing.T) bundle {
	t.Helper()
	t.Parallel()
	rdb := newRedis(t)
	q := newQueue(t, rdb, "bull")
	return newBundle(t, baseConfig(rdb), q, redisTarget{})
}

// setupCluster is setup on the shared three-node Redis Cluster, with the queue name wrapped
// in a hash tag (bull:{q}:…), so that each test's queue lands on whichever node its name
// hashes to.
func setupCluster(t *testing.T) bundle {
	t.Helper()
	t.Parallel()
	c := redistest.Shared(t)
	rdb := c.Client(t)
	cfg := bullmq.Config{Client: rdb, QueueHashTags: true}
	q := "t" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	t.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), rdb, "bull:"+cfg.QueueName(q)+":*") })
	return newBundle(t, cfg, q, redisTarget{cluster: c.Addrs})
}

func newBundle(t *testing.T, cfg bullmq.Config, q string, target redisTarget) bundle {
	t.Helper()
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: cfg}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return bundle{rdb: cfg.Client, queue: q, pub: pub, cfg: cfg, redis: target}
}

func (b bundle) key(s string) string { return "bull:" + b.cfg.QueueName(b.queue) + ":" + s }

func (b bundle) add(t *testing.T, jobs ...bullmq.Job) []bullmq.AddResult {
	t.Helper()
	res, err := b.pub.Add(context.Background(), b.queue, jobs)
	require.NoError(t, err)
	return res
}

func (b bundle) worker(t *testing.T, mod func(*bullmq.WorkerConfig), h bullmq.HandlerFunc) *bullmq.Worker {
	t.Helper()
	wc := bullmq.WorkerConfig{Config: b.cfg, Queue: b.queue, DrainDelay: 200 * time.Millisecond,
		Logger: testLogger{t}}
	if mod != nil {
		mod(&wc)
	}
	w, err := bullmq.NewWorker(wc, h)
	require.NoError(t, err)
	return w
}

func (b bundle) finished(t *testing.T) int64 {
	c, err := b.rdb.ZCard(context.Background(), b.key("completed")).Result()
	require.NoError(t, err)
	f, err := b.rdb.ZCard(context.Background(), b.key("failed")).Result()
	require.NoError(t, err)
	return c + f
}

func job(data behaviour, opts *bullmq.JobOptions) bullmq.Job {
	id := uuid.NewString()
	data.EventID = id
	return bullmq.Job{ID: id, Name: "test.event", Data: mustJSON(data), Opts: opts}
}

func TestGoPublishGoWorker(t *testing.T) {
	b := setup(t)
	jobs := []bullmq.Job{
		job(behaviour{}, nil),
		job(behaviour{Behave: "failUntil", FailUntil: 1}, &bullmq.JobOptions{Attempts: 3, Backoff: &bullmq.Backoff{Type: "fixed", Delay: 50}}),
		job(behaviour{Behave: "fail"}, &bullmq.JobOptions{Attempts: 2, Backoff: &bullmq.Backoff{Type: "exponential", Delay: 10}}),
		job(behaviour{Behave: "unrecoverable"}, &bullmq.JobOptions{Attempts: 5}),
	}
	res := b.add(t, jobs...)
	for i, r := range res {
		assert.Equal(t, bullmq.Created, r.Status)
		assert.Equal(t, jobs[i].ID, r.ID)
	}
	var starts atomic.Int64
	runWorker(t, b.worker(t, func(c *bullmq.WorkerConfig) { c.Concurrency = 3 }, behaveHandler(func(*bullmq.Job) { starts.Add(1) })))
	waitFor(t, 10*time.Second, "4 finished jobs", func() bool { return b.finished(t) == 4 })
	ctx := context.Background()
	h := b.rdb.HGetAll(ctx, b.key(jobs[0].ID)).Val()
	assert.Equal(t, "1", h["atm"])
	assert.JSONEq(t, `{"by":"go","id":"`+jobs[0].ID+`","attempt":0}`, h["returnvalue"])
	h = b.rdb.HGetAll(ctx, b.key(jobs[1].ID)).Val()
	assert.Equal(t, "2", h["atm"])
	assert.Equal(t, "2", h["ats"])
	h = b.rdb.HGetAll(ctx, b.key(jobs[2].ID)).Val()
	assert.Equal(t, "2", h["atm"])
	assert.Equal(t, "boom "+jobs[2].ID, h["failedReason"])
	var st []string
	require.NoError(t, json.Unmarshal([]byte(h["stacktrace"]), &st))
	assert.Len(t, st, 2)
	h = b.rdb.HGetAll(ctx, b.key(jobs[3].ID)).Val()
	assert.Equal(t, "1", h["atm"])
	assert.Equal(t, int64(6), starts.Load())
}

// A handler cancelled by shutdown (past ShutdownTimeout) may have left a call in flight: its
// job is not handed back but left to its lock, which is no longer renewed and runs out.
func TestShutdownLeavesCancelledJobToItsLock(t *testing.T) {
	b := setup(t)
	j := job(behaviour{}, nil)
	b.add(t, j)
	started := make(chan struct{})
	w := b.worker(t, func(c *bullmq.WorkerConfig) {
		c.ShutdownTimeout = 100 * time.Millisecond
		c.LockDuration = 400 * time.Millisecond
		c.DisableStalledCheck = true
	}, func(ctx context.Context, _ *bullmq.Job) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	stop := runWorker(t, w)
	testwait.Recv(t, started, "the job")
	stop()
	ctx := context.Background()
	assert.Empty(t, b.rdb.LRange(ctx, b.key("wait"), 0, -1).Val(), "not handed back")
	assert.Equal(t, []string{j.ID}, b.rdb.LRange(ctx, b.key("active"), 0, -1).Val())
	assert.Equal(t, "", b.rdb.HGet(ctx, b.key(j.ID), "atm").Val())
	waitFor(t, 5*time.Second, "the lock to run out", func() bool { return b.rdb.Exists(ctx, b.key(j.ID)+":lock").Val() == 0 })
}

// On shutdown a running handler finishes its work however long past the lock duration it
// runs (within ShutdownTimeout): its lock is renewed meanwhile, so that another worker's
// stalled check never hands its job to anybody else.
func TestShutdownRenewsTheLockOfARunningCall(t *testing.T) {
	b := setup(t)
	j := job(behaviour{}, nil)
	b.add(t, j)
	started := make(chan struct{})
	var calls atomic.Int64
	slow := func(ctx context.Context, _ *bullmq.Job) (any, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return "done", nil
	}
	lock := func(c *bullmq.WorkerConfig) {
		c.LockDuration = 300 * time.Millisecond
		c.StalledInterval = 50 * time.Millisecond
		c.ShutdownTimeout = 10 * time.Second
	}
	stop := runWorker(t, b.worker(t, lock, slow))
	<-started
	runWorker(t, b.worker(t, lock, slow)) // a second worker, checking for stalled jobs
	t0 := time.Now()
	stop()
	assert.Greater(t, time.Since(t0), time.Second, "shutdown waited for the call")
	ctx := context.Background()
	assert.Equal(t, `"done"`, b.rdb.HGet(ctx, b.key(j.ID), "returnvalue").Val())
	assert.Equal(t, "1", b.rdb.HGet(ctx, b.key(j.ID), "ats").Val())
	assert.Equal(t, int64(1), calls.Load(), "nobody else ran the job")
}

// A renewal that finds the lock gone (here: deleted, as after Redis lost it or another
// worker took the job) cancels the handler at once; the worker does not finish the job.
func TestLostLockCancelsTheHandler(t *testing.T) {
	b := setup(t)
	j := job(behaviour{}, nil)
	b.add(t, j)
	started := make(chan struct{})
	cancelled := make(chan time.Time, 1)
	w := b.worker(t, func(c *bullmq.WorkerConfig) {
		c.LockDuration = 2 * time.Second
		c.DisableStalledCheck = true
	}, func(ctx context.Context, _ *bullmq.Job) (any, error) {
		close(started)
		<-ctx.Done()
		cancelled <- time.Now()
		return "recorded after the loss", nil
	})
	runWorker(t, w)
	<-started
	ctx := context.Background()
	t0 := time.Now()
	require.NoError(t, b.rdb.Del(ctx, b.key(j.ID)+":lock").Err())
	select {
	case at := <-cancelled:
		assert.Less(t, at.Sub(t0), 2*time.Second, "cancelled at the first renewal")
	case <-time.After(5 * time.Second):
		require.FailNow(t, "handler not cancelled")
	}
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, "", b.rdb.HGet(ctx, b.key(j.ID), "returnvalue").Val(), "not finished by the worker that lost it")
	assert.Equal(t, []string{j.ID}, b.rdb.LRange(ctx, b.key("active"), 0, -1).Val())
}

// Renewals that fail (Redis paused: a private redis-server stopped with SIGSTOP) are tried
// again within the lock's time; when the lock may run out before the next try the handler
// is cancelled, before the lock's end, and the worker does not finish the job.
func TestFailingRenewalsCancelTheHandlerBeforeTheLockEnds(t *testing.T) {
	t.Parallel()
	srv := redistest.StartPrivate(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	b := newBundle(t, baseConfig(rdb), "paused", redisTarget{})
	j := job(behaviour{}, nil)
	b.add(t, j)
	started := make(chan time.Time, 1)
	cancelled := make(chan time.Time, 1)
	const lock = 1 * time.Second
	w := b.worker(t, func(c *bullmq.WorkerConfig) {
		c.LockDuration = lock
		c.DisableStalledCheck = true
		c.ShutdownTimeout = 100 * time.Millisecond
	}, func(ctx context.Context, _ *bullmq.Job) (any, error) {
		started <- time.Now()
		<-ctx.Done()
		cancelled <- time.Now()
		return "recorded after the loss", nil
	})
	runWorker(t, w)
	t0 := <-started
	srv.Pause(t)
	select {
	case at := <-cancelled:
		assert.Less(t, at.Sub(t0), lock, "cancelled before the lock taken at the start could run out")
		assert.Greater(t, at.Sub(t0), lock/2, "not before a renewal failed")
	case <-time.After(5 * time.Second):
		require.FailNow(t, "handler not cancelled")
	}
	srv.Resume(t)
	time.Sleep(300 * time.Millisecond)
	ctx := context.Background()
	assert.Equal(t, "", rdb.HGet(ctx, b.key(j.ID), "returnvalue").Val(), "not finished by the worker that lost it")
}
func TestGracefulShutdownFinishesRunningJobs(t *testing.T) {
	b := setup(t)
	j := job(behaviour{}, nil)
	b.add(t, j)
	started := make(chan struct{})
	w := b.worker(t, nil, func(ctx context.Context, _ *bullmq.Job) (any, error) {
		close(started)
		time.Sleep(300 * time.Millisecond)
		return "done", nil
	})
	stop := runWorker(t, w)
	testwait.Recv(t, started, "the job")
	stop()
	assert.Equal(t, `"done"`, b.rdb.HGet(context.Background(), b.key(j.ID), "returnvalue").Val())
}

func TestPausedAndGlobalConcurrency(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.rdb.HSet(ctx, b.key("meta"), "paused", "1").Err())
	var jobs []bullmq.Job
	for range 6 {
		jobs = append(jobs, job(behaviour{SleepMs: 100}, nil))
	}
	b.add(t, jobs...)
	assert.Zero(t, b.rdb.Exists(ctx, b.key("marker")).Val(), "no marker while paused")
	var running, maxRunning atomic.Int64
	var mu sync.Mutex
	h := behaveHandler(func(*bullmq.Job) {
		n := running.Add(1)
		mu.Lock()
		if n > maxRunning.Load() {
			maxRunning.Store(n)
		}
		mu.Unlock()
	})
	w := b.worker(t, func(c *bullmq.WorkerConfig) { c.Concurrency = 4 }, func(ctx context.Context, j *bullmq.Job) (any, error) {
		defer running.Add(-1)
		return h(ctx, j)
	})
	runWorker(t, w)
	time.Sleep(500 * time.Millisecond)
	assert.Zero(t, b.finished(t), "paused queue")
	require.NoError(t, b.rdb.HSet(ctx, b.key("meta"), "concurrency", "2").Err())
	require.NoError(t, b.rdb.HDel(ctx, b.key("meta"), "paused").Err())
	waitFor(t, 10*time.Second, "6 finished", func() bool { return b.finished(t) == 6 })
	assert.LessOrEqual(t, maxRunning.Load(), int64(2))
}

func TestTrimByCountAndAge(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	var jobs []bullmq.Job
	for range 5 {
		jobs = append(jobs, job(behaviour{}, &bullmq.JobOptions{Attempts: 1, RemoveOnComplete: &bullmq.KeepJobs{Count: 2}}))
	}
	b.add(t, jobs...)
	runWorker(t, b.worker(t, nil, behaveHandler(nil)))
	waitFor(t, 10*time.Second, "5 processed", func() bool {
		return b.rdb.LLen(ctx, b.key("wait")).Val() == 0 && b.rdb.LLen(ctx, b.key("active")).Val() == 0
	})
	assert.Equal(t, int64(2), b.rdb.ZCard(ctx, b.key("completed")).Val())
	assert.Equal(t, int64(2), b.rdb.Exists(ctx, b.key(jobs[0].ID), b.key(jobs[1].ID), b.key(jobs[2].ID), b.key(jobs[3].ID), b.key(jobs[4].ID)).Val())

	aged := job(behaviour{}, &bullmq.JobOptions{Attempts: 1, RemoveOnComplete: &bullmq.KeepJobs{Age: 1}})
	b.add(t, aged)
	waitFor(t, 5*time.Second, "aged job done", func() bool { return b.rdb.ZScore(ctx, b.key("completed"), aged.ID).Err() == nil })
	time.Sleep(1100 * time.Millisecond)
	next := job(behaviour{}, &bullmq.JobOptions{Attempts: 1, RemoveOnComplete: &bullmq.KeepJobs{Age: 1}})
	b.add(t, next)
	waitFor(t, 5*time.Second, "aged job trimmed", func() bool { return b.rdb.Exists(ctx, b.key(aged.ID)).Val() == 0 })
	assert.Error(t, b.rdb.ZScore(ctx, b.key("completed"), aged.ID).Err())
}

func TestAddRejectsBadIDs(t *testing.T) {
	b := setup(t)
	for _, id := range []string{"", "123", "0", "-5", "a:b"} {
		_, err := b.pub.Add(context.Background(), b.queue, []bullmq.Job{{ID: id, Name: "x", Data: []byte("{}")}})
		assert.Error(t, err, id)
	}
	assert.NoError(t, bullmq.ValidateJobID(uuid.NewString()))
	assert.NoError(t, bullmq.ValidateJobID("12a"))
}

func TestPublishHonorsContext(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.pub.Add(ctx, b.queue, []bullmq.Job{job(behaviour{}, nil)})
	assert.True(t, errors.Is(err, context.Canceled), err)
	require.NoError(t, b.pub.Close())
	_, err = b.pub.Add(context.Background(), b.queue, []bullmq.Job{job(behaviour{}, nil)})
	assert.ErrorIs(t, err, bullmq.ErrPublisherClosed)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	assert.Error(t, bullmq.Config{}.Validate())
	_, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: bullmq.Config{Client: redis.NewClient(&redis.Options{})}}, func(context.Context, *bullmq.Job) (any, error) { return nil, nil })
	assert.Error(t, err, "queue required")
	c := bullmq.Config{Client: redis.NewClient(&redis.Options{}), Prefix: "bull", Attempts: 1, Backoff: bullmq.Backoff{Type: "linear"}, RemoveOnFailAge: time.Hour}
	assert.Error(t, c.Validate())
	c.Backoff.Type = "fixed"
	assert.NoError(t, c.Validate())
}

// testLogger sends the worker's errors to the test log.
type testLogger struct{ t testing.TB }

func (l testLogger) Error(msg string, err error, fields watermill.LogFields) {
	l.t.Logf("ERROR %s: %v %v", msg, err, fields)
}
func (l testLogger) Info(msg string, fields watermill.LogFields)  {}
func (l testLogger) Debug(msg string, fields watermill.LogFields) {}
func (l testLogger) Trace(msg string, fields watermill.LogFields) {}
func (l testLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return l
}

// ErrHandBack puts the job back without counting an attempt.
func TestErrHandBack(t *testing.T) {
	b := setup(t)
	j := job(behaviour{}, nil)
	b.add(t, j)
	var calls atomic.Int64
	runWorker(t, b.worker(t, nil, func(context.Context, *bullmq.Job) (any, error) {
		if calls.Add(1) == 1 {
			return nil, fmt.Errorf("not now: %w", bullmq.ErrHandBack)
		}
		return "ok", nil
	}))
	waitFor(t, 10*time.Second, "job completed", func() bool { return b.finished(t) == 1 })
	h := b.rdb.HGetAll(context.Background(), b.key(j.ID)).Val()
	assert.Equal(t, "1", h["atm"])
	assert.Equal(t, "2", h["ats"])
	assert.Equal(t, `"ok"`, h["returnvalue"])
}

// A snoozed job waits in delayed for its delay with attemptsMade unchanged, then runs again
// with Snoozes and Snoozed counted; a retry afterwards spends an attempt as usual.
func TestSnoozeKeepsAttempts(t *testing.T) {
	b := setup(t)
	j := job(behaviour{}, &bullmq.JobOptions{Attempts: 2, Backoff: &bullmq.Backoff{Type: "fixed", Delay: 10}})
	b.add(t, j)
	type seen struct {
		attemptsMade, snoozes int
		snoozed               time.Duration
		at                    time.Time
	}
	runs := make(chan seen, 4)
	var n atomic.Int32
	runWorker(t, b.worker(t, nil, func(_ context.Context, jb *bullmq.Job) (any, error) {
		runs <- seen{jb.AttemptsMade, jb.Snoozes, jb.Snoozed, time.Now()}
		switch n.Add(1) {
		case 1:
			return nil, bullmq.Snooze(400*time.Millisecond, errors.New("429"))
		case 2:
			return nil, errors.New("boom")
		}
		return "ok", nil
	}))
	first := testwait.Recv(t, runs, "the first run")
	ctx := context.Background()
	waitFor(t, 2*time.Second, "job in delayed", func() bool { return b.rdb.ZCard(ctx, b.key("delayed")).Val() == 1 })
	h := b.rdb.HGetAll(ctx, b.key(j.ID)).Val()
	assert.Equal(t, "", h["atm"], "a snooze spends no attempt")
	assert.Equal(t, "", h["failedReason"])
	second := testwait.Recv(t, runs, "the second run")
	assert.GreaterOrEqual(t, second.at.Sub(first.at), 400*time.Millisecond)
	assert.Equal(t, seen{attemptsMade: 0, snoozes: 1, snoozed: 400 * time.Millisecond}, seen{second.attemptsMade, second.snoozes, second.snoozed, time.Time{}})
	third := testwait.Recv(t, runs, "the third run")
	assert.Equal(t, 1, third.attemptsMade, "the retry spent the first attempt")
	waitFor(t, 5*time.Second, "job completed", func() bool { return b.finished(t) == 1 })
	assert.Equal(t, "2", b.rdb.HGet(ctx, b.key(j.ID), "atm").Val(), "the retry and the completion; the snooze none")
}

// A job that waits (Wait) is delayed like a snoozed one but counts nothing: neither an
// attempt nor a snooze.
func TestWaitCountsNothing(t *testing.T) {
	b := setup(t)
	j := job(behaviour{}, &bullmq.JobOptions{Attempts: 2, Backoff: &bullmq.Backoff{Type: "fixed", Delay: 10}})
	b.add(t, j)
	type seen struct {
		attemptsMade, snoozes int
		snoozed               time.Duration
		at                    time.Time
	}
	runs := make(chan seen, 4)
	var n atomic.Int32
	runWorker(t, b.worker(t, nil, func(_ context.Context, jb *bullmq.Job) (any, error) {
		runs <- seen{jb.AttemptsMade, jb.Snoozes, jb.Snoozed, time.Now()}
		if n.Add(1) <= 2 {
			return nil, bullmq.Wait(200*time.Millisecond, errors.New("over budget"))
		}
		return "ok", nil
	}))
	first := testwait.Recv(t, runs, "the first run")
	testwait.Recv(t, runs, "the second run")
	third := testwait.Recv(t, runs, "the third run")
	assert.GreaterOrEqual(t, third.at.Sub(first.at), 400*time.Millisecond, "delayed twice")
	assert.Equal(t, seen{}, seen{third.attemptsMade, third.snoozes, third.snoozed, time.Time{}})
	waitFor(t, 5*time.Second, "job completed", func() bool { return b.finished(t) == 1 })
	assert.Equal(t, "1", b.rdb.HGet(context.Background(), b.key(j.ID), "atm").Val(), "the completion alone")
}
