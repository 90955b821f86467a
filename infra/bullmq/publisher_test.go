package bullmq_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
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
	assert.Equal(t, id, h["deid"])
	assert.JSONEq(t, `{"attempts":3,"backoff":{"type":"exponential","delay":1000},"removeOnComplete":{"age":604800},"removeOnFail":{"age":604800},"jobId":"`+id+`","de":{"id":"`+id+`","ttl":604800000}}`, h["opts"])
	var wm map[string]string
	require.NoError(t, json.Unmarshal([]byte(h["wm"]), &wm))
	assert.Equal(t, "abc", wm["trace"])
	ttl := b.rdb.PTTL(ctx, b.key("de:"+id)).Val()
	assert.InDelta(t, (7 * 24 * time.Hour).Seconds(), ttl.Seconds(), 60)
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
