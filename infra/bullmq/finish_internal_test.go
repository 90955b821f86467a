package bullmq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A finish call of activeBatchMin jobs or more takes them out of active by rewriting the
// list: the ids held by others stay, in their order; a job whose lock holds its token but
// which is not in active answers -3 and is not settled (not completed); one id in active twice loses one
// copy per settled job, from the tail, as LREM -1 does.
func TestFinishBatchRewritesActive(t *testing.T) {
	t.Parallel()
	w, rdb := finishTestWorker(t)
	k := w.keys
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	ids := []string{"j1", "j2", "j3", "j4", "j5", "j6"}
	var reqs []*finishReq
	for i, id := range ids {
		require.NoError(t, rdb.HSet(ctx, k.job(id), "name", "n", "data", "{}", "opts", "{}").Err())
		tok := w.token + ":" + id
		require.NoError(t, rdb.Set(ctx, k.lock(id), tok, time.Minute).Err())
		keep := KeepJobs{Count: 100}
		reqs = append(reqs, &finishReq{job: &Job{ID: id, token: tok, Opts: &JobOptions{Attempts: 1, RemoveOnComplete: &keep}},
			kind: finishComplete, value: fmt.Sprintf(`{"i":%d}`, i)})
	}
	// j5 is not in active; j6 twice (one copy goes, the one nearest the tail).
	require.NoError(t, rdb.RPush(ctx, k.active, "x1", "j6", "j4", "x2", "j3", "j2", "x3", "j1", "j6").Err())

	cmds, err := runPipelined(ctx, rdb, []scriptCall{w.finishCall(reqs, time.Now().UnixMilli(), 0)})
	require.NoError(t, err)
	res, err := cmds[0].Slice()
	require.NoError(t, err)
	assert.Equal(t, []any{int64(1), int64(1), int64(1), int64(1), int64(-3), int64(1)}, res[0])
	assert.Equal(t, []string{"x1", "j6", "x2", "x3"}, rdb.LRange(ctx, k.active, 0, -1).Val())
	done := rdb.ZRange(ctx, k.completed, 0, -1).Val()
	assert.ElementsMatch(t, []string{"j1", "j2", "j3", "j4", "j6"}, done)
	assert.Equal(t, int64(0), rdb.Exists(ctx, k.lock("j1")).Val())
	assert.Equal(t, `{"i":0}`, rdb.HGet(ctx, k.job("j1"), "returnvalue").Val())
}

// A job retried at once and taken again in the same finish call keeps the lock of its new
// attempt: the settled jobs' locks are deleted (with the trimmed jobs' keys) before the take.
func TestFinishRetryTakenAgainKeepsNewLock(t *testing.T) {
	t.Parallel()
	w, rdb := finishTestWorker(t)
	k := w.keys
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var reqs []*finishReq
	for _, id := range []string{"r", "c1", "c2", "c3", "c4"} {
		require.NoError(t, rdb.HSet(ctx, k.job(id), "name", "n", "data", "{}", "opts", "{}").Err())
		tok := w.token + ":old-" + id
		require.NoError(t, rdb.Set(ctx, k.lock(id), tok, time.Minute).Err())
		require.NoError(t, rdb.LPush(ctx, k.active, id).Err())
		keep := KeepJobs{Count: 1}
		req := &finishReq{job: &Job{ID: id, token: tok, Opts: &JobOptions{Attempts: 3, RemoveOnComplete: &keep}},
			kind: finishComplete, value: "null"}
		if id == "r" {
			req.kind, req.value, req.stack = finishRetry, "boom", `["boom"]`
		}
		reqs = append(reqs, req)
	}
	cmds, err := runPipelined(ctx, rdb, []scriptCall{w.finishCall(reqs, time.Now().UnixMilli(), 1)})
	require.NoError(t, err)
	res, err := cmds[0].Slice()
	require.NoError(t, err)
	taken, _, _ := w.parseTaken(res[1:], time.Now())
	require.Len(t, taken, 1)
	assert.Equal(t, "r", taken[0].ID)
	assert.Equal(t, taken[0].token, rdb.Get(ctx, k.lock("r")).Val(), "the new attempt's lock")
	assert.Equal(t, []string{"r"}, rdb.LRange(ctx, k.active, 0, -1).Val())
	// Kept: the newest completed job only; the others' hashes and every old lock are gone.
	assert.Equal(t, int64(1), rdb.ZCard(ctx, k.completed).Val())
	assert.Equal(t, int64(1), rdb.Exists(ctx, k.job("c1"), k.job("c2"), k.job("c3"), k.job("c4")).Val())
	assert.Equal(t, int64(0), rdb.Exists(ctx, k.lock("c1"), k.lock("c2"), k.lock("c3"), k.lock("c4")).Val())
}

// finishTestWorker is a worker of a queue of its own on testRedis, for calling its finish
// script directly; the queue's keys go when t ends.
func finishTestWorker(t *testing.T) (*Worker, *redis.Client) {
	t.Helper()
	rdb := testRedis(t)
	cfg := WorkerConfig{Config: Config{Client: rdb}, Queue: "t" + uuid.NewString()[:8], Concurrency: 10}
	w, err := NewWorker(cfg, func(context.Context, *Job) (any, error) { return nil, nil })
	require.NoError(t, err)
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), w.keys.base+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	return w, rdb
}
