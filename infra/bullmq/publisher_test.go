package bullmq_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
)

// Publish maps a watermill message onto a job: UUID = jobId, metadata
// event_type = name, payload = data, the publisher's default options.
func TestPublishMapsMessage(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	id := uuid.NewString()
	payload := `{"event_id":"` + id + `","workspace_id":"ws-9","event_type":"store.verification_requested","payload":{"store_id":"s1"}}`
	msg := message.NewMessage(id, []byte(payload))
	msg.Metadata.Set(bullmq.MetadataJobName, "store.verification_requested")
	msg.Metadata.Set("trace", "abc")
	require.NoError(t, b.pub.Publish(b.queue, msg))
	require.NoError(t, b.pub.Publish(b.queue, msg), "a duplicate is not an error")

	h := b.rdb.HGetAll(ctx, b.key(id)).Val()
	assert.Equal(t, "store.verification_requested", h["name"])
	assert.Equal(t, payload, h["data"])
	assert.NotContains(t, h, "deid")
	assert.JSONEq(t, `{"attempts":3,"backoff":{"type":"exponential","delay":1000},"removeOnComplete":1000,"removeOnFail":{"age":86400},"jobId":"`+id+`"}`, h["opts"])
	var wm map[string]string
	require.NoError(t, json.Unmarshal([]byte(h["wm"]), &wm))
	assert.Equal(t, "abc", wm["trace"])
	assert.Zero(t, b.rdb.Exists(ctx, b.key("de:"+id)).Val())
	assert.Equal(t, int64(1), b.rdb.LLen(ctx, b.key("wait")).Val())

	type envelope struct {
		EventID     string `json:"event_id"`
		WorkspaceID string `json:"workspace_id"`
	}
	got := make(chan envelope, 1)
	runWorker(t, b.worker(t, nil, func(_ context.Context, j *bullmq.Job) (any, error) {
		var e envelope
		require.NoError(t, json.Unmarshal(j.Data, &e))
		assert.Equal(t, "abc", j.Metadata["trace"])
		got <- e
		return nil, nil
	}))
	select {
	case e := <-got:
		assert.Equal(t, id, e.EventID)
		assert.Equal(t, "ws-9", e.WorkspaceID)
	case <-time.After(5 * time.Second):
		t.Fatal("job not consumed")
	}
}

// A job that stalls more than MaxStalledCount fails without running again.
func TestStalledTooOftenFails(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	j := job(behaviour{}, nil)
	b.add(t, j)
	// Simulate a worker that took the job and died: active, no lock, stalled once before.
	require.NoError(t, b.rdb.RPopLPush(ctx, b.key("wait"), b.key("active")).Err())
	require.NoError(t, b.rdb.HSet(ctx, b.key(j.ID), "stc", 1).Err())
	var runs atomic.Int64
	runWorker(t, b.worker(t, func(c *bullmq.WorkerConfig) { c.StalledInterval = 100 * time.Millisecond },
		func(context.Context, *bullmq.Job) (any, error) { runs.Add(1); return nil, nil }))
	waitFor(t, 10*time.Second, "job failed", func() bool { return b.rdb.ZCard(ctx, b.key("failed")).Val() == 1 })
	assert.Zero(t, runs.Load())
	h := b.rdb.HGetAll(ctx, b.key(j.ID)).Val()
	assert.Equal(t, "job stalled more than allowable limit", h["failedReason"])
	assert.Equal(t, "2", h["stc"])
	assert.Empty(t, h["defa"])
}

// A hash-tagged prefix (Redis Cluster) works for both Go and Node.js.
func TestHashTagPrefix(t *testing.T) {
	t.Parallel()
	requireNode(t)
	rdb := newRedis(t)
	const prefix = "{bq}"
	q := newQueue(t, rdb, prefix)
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb, Prefix: prefix}}, nil)
	require.NoError(t, err)
	j := job(behaviour{}, nil)
	_, err = pub.Add(context.Background(), q, []bullmq.Job{j})
	require.NoError(t, err)
	nw := startNodeWorker(t, map[string]any{"queue": q, "prefix": prefix})
	waitFor(t, 10*time.Second, "node completed the job", func() bool {
		return rdb.ZCard(context.Background(), prefix+":"+q+":completed").Val() == 1
	})
	nw.stop(t)
	assert.Equal(t, 1, nw.count("completed", j.ID))
}

// With the defaults a completed job leaves Redis once a thousand newer ones completed, and
// its id is still recognised when the outbox publishes it again within the dedup window:
// it is not added, and so not run, a second time.
func TestRepublishedAfterLeavingRedisNotRunAgain(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := job(behaviour{}, nil)
	b.add(t, first)
	rest := make([]bullmq.Job, bullmq.DefaultKeepCompleted)
	for i := range rest {
		rest[i] = job(behaviour{}, nil)
	}
	var runs sync.Map
	count := func(id string) int64 {
		v, _ := runs.LoadOrStore(id, new(atomic.Int64))
		return v.(*atomic.Int64).Load()
	}
	var total atomic.Int64
	stop := runWorker(t, b.worker(t, func(c *bullmq.WorkerConfig) { c.Concurrency = 20 },
		func(_ context.Context, j *bullmq.Job) (any, error) {
			v, _ := runs.LoadOrStore(j.ID, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			total.Add(1)
			return nil, nil
		}))
	defer stop()
	// The first completes alone, so that the thousand completed after it are all newer.
	waitFor(t, 10*time.Second, "the first job completed", func() bool { return b.rdb.ZCard(ctx, b.key("completed")).Val() == 1 })
	time.Sleep(5 * time.Millisecond)
	b.add(t, rest...)
	waitFor(t, 30*time.Second, "every job completed", func() bool {
		return total.Load() == int64(len(rest)+1) && b.rdb.LLen(ctx, b.key("active")).Val() == 0
	})
	require.Zero(t, b.rdb.Exists(ctx, b.key(first.ID)).Val(), "the first job left Redis")
	require.Equal(t, int64(bullmq.DefaultKeepCompleted), b.rdb.ZCard(ctx, b.key("completed")).Val())

	again := first
	again.Data = mustJSON(behaviour{EventID: first.ID, Behave: "again"})
	marker := job(behaviour{}, nil)
	res, err := b.pub.Add(ctx, b.queue, []bullmq.Job{again, marker})
	require.NoError(t, err)
	assert.Equal(t, []bullmq.AddResult{{ID: first.ID, Status: bullmq.Deduplicated}, {ID: marker.ID, Status: bullmq.Created}}, res)
	waitFor(t, 10*time.Second, "the job added after it ran", func() bool { return count(marker.ID) == 1 })
	assert.Equal(t, int64(1), count(first.ID))
	assert.Zero(t, b.rdb.Exists(ctx, b.key(first.ID)).Val(), "nothing written for the re-publication")
}

// An id is remembered for the dedup window after its add, then forgotten with its bucket.
func TestDedupWindowExpires(t *testing.T) {
	t.Parallel()
	rdb, q, pub := dedupPublisher(t, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	j := job(behaviour{}, nil)
	_, err := pub.Add(ctx, q, []bullmq.Job{j})
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, "bull:"+q+":"+j.ID).Err()) // the job left Redis
	res, err := pub.Add(ctx, q, []bullmq.Job{j})
	require.NoError(t, err)
	assert.Equal(t, bullmq.Deduplicated, res[0].Status)
	var buckets []string
	iter := rdb.Scan(ctx, 0, "bull:"+q+":dd:*", 100).Iterator()
	for iter.Next(ctx) {
		buckets = append(buckets, iter.Val())
	}
	require.Len(t, buckets, 1)
	ttl := rdb.PTTL(ctx, buckets[0]).Val()
	assert.True(t, ttl > time.Second && ttl <= 1500*time.Millisecond, "bucket expires a window and at most two buckets after the add: %s", ttl)
	waitFor(t, 5*time.Second, "the bucket expired", func() bool { return rdb.Exists(ctx, buckets[0]).Val() == 0 })
	require.NoError(t, rdb.Del(ctx, "bull:"+q+":"+j.ID).Err())
	res, err = pub.Add(ctx, q, []bullmq.Job{j})
	require.NoError(t, err)
	assert.Equal(t, bullmq.Created, res[0].Status)
}

// One Add call reads the window's buckets for all its jobs at once: an id remembered in an
// older bucket is deduplicated wherever it sits among the call's jobs, the others are created
// and remembered together in the current bucket.
func TestDedupWindowOneCallManyJobs(t *testing.T) {
	t.Parallel()
	rdb, q, pub := dedupPublisher(t, 4*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gone := func(jobs ...bullmq.Job) { // the jobs left Redis
		for _, j := range jobs {
			require.NoError(t, rdb.Del(ctx, "bull:"+q+":"+j.ID).Err())
		}
	}
	old1, old2 := job(behaviour{}, nil), job(behaviour{}, nil)
	_, err := pub.Add(ctx, q, []bullmq.Job{old1, old2})
	require.NoError(t, err)
	gone(old1, old2)
	time.Sleep(1100 * time.Millisecond) // past the bucket of 0.5 s they were remembered in

	a, b, c := job(behaviour{}, nil), job(behaviour{}, nil), job(behaviour{}, nil)
	res, err := pub.Add(ctx, q, []bullmq.Job{a, old2, b, old1, c})
	require.NoError(t, err)
	assert.Equal(t, []bullmq.AddResult{{ID: a.ID, Status: bullmq.Created}, {ID: old2.ID, Status: bullmq.Deduplicated},
		{ID: b.ID, Status: bullmq.Created}, {ID: old1.ID, Status: bullmq.Deduplicated}, {ID: c.ID, Status: bullmq.Created}}, res)
	gone(a, b, c)
	res, err = pub.Add(ctx, q, []bullmq.Job{c, a, b})
	require.NoError(t, err)
	assert.Equal(t, []bullmq.AddResult{{ID: c.ID, Status: bullmq.Deduplicated}, {ID: a.ID, Status: bullmq.Deduplicated},
		{ID: b.ID, Status: bullmq.Deduplicated}}, res)
}

// dedupPublisher returns a Redis client, a fresh queue and a publisher whose finished jobs
// leave Redis and whose ids are remembered for window.
func dedupPublisher(t *testing.T, window time.Duration) (*redis.Client, string, *bullmq.Publisher) {
	t.Helper()
	rdb := newRedis(t)
	q := newQueue(t, rdb, "bull")
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb,
		RemoveOnComplete: bullmq.KeepJobs{Remove: true}, DedupWindow: window}}, nil)
	require.NoError(t, err)
	return rdb, q, pub
}

// One add call checks its job keys with one EXISTS; a job that exists, and a job repeated
// within the call, are duplicates all the same (nothing written, a duplicated event), with
// and without the dedup window.
func TestAddOneCallExistingAndRepeated(t *testing.T) {
	t.Parallel()
	for _, window := range []time.Duration{-1, time.Minute} {
		rdb := newRedis(t)
		q := newQueue(t, rdb, "bull")
		pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb, DedupWindow: window}}, nil)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a, b, c := job(behaviour{}, nil), job(behaviour{}, nil), job(behaviour{}, nil)
		_, err = pub.Add(ctx, q, []bullmq.Job{a})
		require.NoError(t, err)
		b2 := b
		b2.Data = mustJSON(behaviour{Behave: "fail"})
		res, err := pub.Add(ctx, q, []bullmq.Job{b, a, c, b2})
		require.NoError(t, err)
		assert.Equal(t, []bullmq.AddResult{{ID: b.ID, Status: bullmq.Created}, {ID: a.ID, Status: bullmq.Duplicate},
			{ID: c.ID, Status: bullmq.Created}, {ID: b.ID, Status: bullmq.Duplicate}}, res, "window %s", window)
		assert.Equal(t, []string{c.ID, b.ID, a.ID}, rdb.LRange(ctx, "bull:"+q+":wait", 0, -1).Val())
		assert.Equal(t, string(b.Data), rdb.HGet(ctx, "bull:"+q+":"+b.ID, "data").Val(), "the first b is kept")
		dup := 0
		for _, m := range rdb.XRange(ctx, "bull:"+q+":events", "-", "+").Val() {
			if m.Values["event"] == "duplicated" {
				dup++
			}
		}
		assert.Equal(t, 2, dup)

		// No job of the call exists beforehand: the one EXISTS finds none.
		d, e := job(behaviour{}, nil), job(behaviour{}, nil)
		res, err = pub.Add(ctx, q, []bullmq.Job{d, e, d})
		require.NoError(t, err)
		assert.Equal(t, []bullmq.AddResult{{ID: d.ID, Status: bullmq.Created}, {ID: e.ID, Status: bullmq.Created},
			{ID: d.ID, Status: bullmq.Duplicate}}, res, "window %s", window)
		assert.Equal(t, []string{e.ID, d.ID, c.ID, b.ID, a.ID}, rdb.LRange(ctx, "bull:"+q+":wait", 0, -1).Val())
	}
}
