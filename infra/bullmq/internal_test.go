package bullmq

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testRedis is a client of REDIS_URL (or the local Redis), closed when t ends.
func testRedis(t *testing.T) *redis.Client {
	t.Helper()
	u := os.Getenv("REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(u)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// A script Redis has never seen answers NOSCRIPT inside the pipeline;
// runPipelined loads it and runs the calls again.
func TestRunPipelinedReloadsOnNoScript(t *testing.T) {
	t.Parallel()
	rdb := testRedis(t)
	s := redis.NewScript(fmt.Sprintf("-- %s\nreturn tonumber(ARGV[1]) * 2", uuid.NewString()))
	calls := []scriptCall{{script: s, args: []any{1}}, {script: s, args: []any{21}}}
	cmds, err := runPipelined(context.Background(), rdb, calls)
	require.NoError(t, err)
	assert.Equal(t, int64(2), cmds[0].Val())
	assert.Equal(t, int64(42), cmds[1].Val())
}

func TestKeepJobsJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k    KeepJobs
		json string
	}{
		{KeepJobs{Remove: true}, `true`},
		{KeepJobs{Count: 10}, `10`},
		{KeepJobs{Age: 3600}, `{"age":3600}`},
		{KeepJobs{Age: 60, Count: 5, Limit: 100}, `{"age":60,"count":5,"limit":100}`},
	} {
		b, err := json.Marshal(tc.k)
		require.NoError(t, err)
		assert.JSONEq(t, tc.json, string(b))
		var back KeepJobs
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, tc.k, back)
	}
	var k KeepJobs
	require.NoError(t, json.Unmarshal([]byte(`false`), &k))
	assert.Equal(t, KeepJobs{}, k)
	require.NoError(t, json.Unmarshal([]byte(`0`), &k))
	assert.True(t, k.Remove)
}

func TestKeepArgs(t *testing.T) {
	t.Parallel()
	c, a, l := (*KeepJobs)(nil).keepArgs()
	assert.Equal(t, []any{"-1", "", 1000}, []any{c, a, l})
	c, a, l = (&KeepJobs{Remove: true}).keepArgs()
	assert.Equal(t, []any{"0", "", 1000}, []any{c, a, l})
	c, a, l = (&KeepJobs{Age: 60, Count: 3, Limit: 10}).keepArgs()
	assert.Equal(t, []any{"3", "60", 10}, []any{c, a, l})
}

// BullMQ's built-in backoffs: fixed delay, exponential 2^attemptsMade * delay.
func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	exp := &Backoff{Type: BackoffExponential, Delay: 1000}
	assert.Equal(t, int64(1000), backoffDelay(exp, 0))
	assert.Equal(t, int64(2000), backoffDelay(exp, 1))
	assert.Equal(t, int64(8000), backoffDelay(exp, 3))
	assert.Equal(t, int64(500), backoffDelay(&Backoff{Type: BackoffFixed, Delay: 500}, 4))
	assert.Zero(t, backoffDelay(nil, 2))
}

func TestParseOptionsFromNode(t *testing.T) {
	t.Parallel()
	o, err := parseOptions(`{"attempts":4,"backoff":250,"removeOnComplete":true,"removeOnFail":{"age":60,"count":2},"de":{"id":"x","ttl":5000},"stackTraceLimit":3,"lifo":false}`)
	require.NoError(t, err)
	assert.Equal(t, 4, o.Attempts)
	assert.Equal(t, &Backoff{Type: BackoffFixed, Delay: 250}, o.Backoff)
	assert.True(t, o.RemoveOnComplete.Remove)
	assert.Equal(t, &KeepJobs{Age: 60, Count: 2}, o.RemoveOnFail)
	assert.Equal(t, &Deduplication{ID: "x", TTL: 5000}, o.Deduplication)
	assert.Equal(t, 3, *o.StackTraceLimit)
}

// A wait on the marker shorter than BZPOPMIN's millisecond resolution still ends: a timeout
// formatted as "0.000" would block until the next job is added (delayed retries never
// promoted on a quiet queue).
func TestWaitMarkerBelowAMillisecondEnds(t *testing.T) {
	t.Parallel()
	rdb := testRedis(t)
	w, err := NewWorker(WorkerConfig{Config: Config{Client: rdb, Prefix: "t" + uuid.NewString()[:8]}, Queue: "q"},
		func(context.Context, *Job) (any, error) { return nil, nil })
	require.NoError(t, err)
	for _, d := range []time.Duration{0, 300 * time.Microsecond, 1500 * time.Microsecond} {
		done := make(chan struct{})
		go func() { w.waitMarker(context.Background(), d); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			_ = rdb.Close() // ends the blocked call
			t.Fatalf("waitMarker(%v) still blocked after 2 s", d)
		}
	}
}
