package bullmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Operators' functions: what a console shows of a queue beyond QueueCounts and
// OldestWaiting, and the two actions on a failed job. Each takes only cfg.Client, cfg.Prefix
// (default DefaultPrefix) and cfg.QueueHashTags, and is safe for concurrent use.

// ErrJobNotFound is returned by RetryJob and RemoveJob when the queue holds no job of that id.
var ErrJobNotFound = errors.New("bullmq: job not found")

// ErrJobNotFailed is returned by RetryJob and RemoveJob when the job exists but is not in the
// failed set (waiting, active, delayed or completed): it is left alone.
var ErrJobNotFailed = errors.New("bullmq: job is not failed")

// FailedJob is one job of the failed set, as an operator sees it (its data is left out).
type FailedJob struct {
	ID   string
	Name string
	// FailedReason is the error of the last attempt, as the worker wrote it.
	FailedReason string
	// Stacktrace holds the errors of the failed attempts, oldest first (BullMQ keeps a
	// bounded number; Go workers write error strings, Node.js workers stacks).
	Stacktrace []string
	// AttemptsMade counts finished attempts ("atm").
	AttemptsMade int
	// Timestamp is when the job was added; FinishedOn when it failed.
	Timestamp  time.Time
	FinishedOn time.Time
	// Data is the job's data as its producer wrote it.
	Data []byte
}

// FailedJobs returns up to limit jobs of queue's failed set, the latest failure first (by
// the set's score, the failure time). A member whose hash is gone (trimmed meanwhile) is
// skipped. Two round trips; the answer is a snapshot.
func FailedJobs(ctx context.Context, cfg Config, queue string, limit int) ([]FailedJob, error) {
	k, err := adminKeys(cfg, queue)
	if err != nil {
		return nil, fmt.Errorf("bullmq.FailedJobs: %w", err)
	}
	if limit <= 0 {
		return nil, nil
	}
	ids, err := cfg.Client.ZRevRange(ctx, k.failed, 0, int64(limit-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("bullmq.FailedJobs %s: %w", queue, err)
	}
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err = cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, k.job(id), "name", "failedReason", "stacktrace", "atm", "timestamp", "finishedOn", "data")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bullmq.FailedJobs %s: %w", queue, err)
	}
	out := make([]FailedJob, 0, len(ids))
	for i, id := range ids {
		v := cmds[i].Val()
		if len(v) != 7 || v[0] == nil {
			continue
		}
		s := func(i int) string { x, _ := v[i].(string); return x }
		j := FailedJob{ID: id, Name: s(0), FailedReason: s(1), Timestamp: msTime(s(4)), FinishedOn: msTime(s(5)), Data: []byte(s(6))}
		_ = json.Unmarshal([]byte(s(2)), &j.Stacktrace)
		j.AttemptsMade, _ = strconv.Atoi(s(3))
		out = append(out, j)
	}
	return out, nil
}

// retryScript moves a failed job back to wait, as BullMQ's Job.retry("failed") does:
// out of the failed set, finishedOn, processedOn and failedReason cleared, attempts made
// reset to 0 (the job gets its whole attempts again), pushed at the head of wait (the tail
// for lifo jobs), the queue's marker set unless it is paused or at its global concurrency,
// and a "waiting" event with prev "failed". The stacktrace stays: it is the job's history.
//
// KEYS: 1 failed, 2 job hash, 3 wait, 4 meta, 5 active, 6 marker, 7 events.
// ARGV: 1 jobId.
// Returns 1 done, -1 no such job, -2 not in the failed set.
var retryScript = redis.NewScript(`
local rcall = redis.call
if rcall("EXISTS", KEYS[2]) == 0 then return -1 end
if rcall("ZREM", KEYS[1], ARGV[1]) == 0 then return -2 end
rcall("HDEL", KEYS[2], "finishedOn", "processedOn", "failedReason", "defa")
rcall("HSET", KEYS[2], "atm", 0)
local lifo = false
local okOpts, opts = pcall(cjson.decode, rcall("HGET", KEYS[2], "opts") or "{}")
if okOpts and type(opts) == "table" and opts["lifo"] == true then lifo = true end
if lifo then rcall("RPUSH", KEYS[3], ARGV[1]) else rcall("LPUSH", KEYS[3], ARGV[1]) end
local attrs = rcall("HMGET", KEYS[4], "paused", "concurrency", "opts.maxLenEvents")
if not attrs[1] and ((not attrs[2]) or rcall("LLEN", KEYS[5]) < tonumber(attrs[2])) then
  rcall("ZADD", KEYS[6], 0, "0")
end
rcall("XADD", KEYS[7], "MAXLEN", "~", attrs[3] or 10000, "*", "event", "waiting", "jobId", ARGV[1], "prev", "failed")
return 1
`)

// removeScript deletes a failed job: its hash and logs, its failed-set membership, and its
// deduplication key when that key still names this job (as BullMQ's remove does), then adds a
// "removed" event with prev "failed".
//
// KEYS: 1 failed, 2 job hash, 3 job logs, 4 events, 5 meta.
// ARGV: 1 jobId, 2 the queue's key prefix "<prefix>:<queue>:" (for the de: key, same slot).
// Returns 1 done, -1 no such job, -2 not in the failed set.
var removeScript = redis.NewScript(`
local rcall = redis.call
if rcall("ZSCORE", KEYS[1], ARGV[1]) == false then
  if rcall("EXISTS", KEYS[2]) == 0 then return -1 end
  return -2
end
local deid = rcall("HGET", KEYS[2], "deid")
if deid then
  local dk = ARGV[2] .. "de:" .. deid
  if rcall("GET", dk) == ARGV[1] then rcall("DEL", dk) end
end
rcall("ZREM", KEYS[1], ARGV[1])
rcall("DEL", KEYS[2], KEYS[3])
local maxEvents = rcall("HGET", KEYS[5], "opts.maxLenEvents") or 10000
rcall("XADD", KEYS[4], "MAXLEN", "~", maxEvents, "*", "event", "removed", "jobId", ARGV[1], "prev", "failed")
return 1
`)

// RetryJob moves the failed job id of queue back to wait with its attempts reset (see
// retryScript), atomically. ErrJobNotFound when there is no such job, ErrJobNotFailed when it
// is not failed (then nothing changes).
func RetryJob(ctx context.Context, cfg Config, queue, id string) error {
	k, err := adminKeys(cfg, queue)
	if err != nil {
		return fmt.Errorf("bullmq.RetryJob: %w", err)
	}
	n, err := retryScript.Run(ctx, cfg.Client, []string{k.failed, k.job(id), k.wait, k.meta, k.active, k.marker, k.events}, id).Int()
	return adminResult("bullmq.RetryJob", queue, id, n, err)
}

// RemoveJob deletes the failed job id of queue for good (see removeScript), atomically.
// ErrJobNotFound when there is no such job, ErrJobNotFailed when it is not failed (then
// nothing changes).
func RemoveJob(ctx context.Context, cfg Config, queue, id string) error {
	k, err := adminKeys(cfg, queue)
	if err != nil {
		return fmt.Errorf("bullmq.RemoveJob: %w", err)
	}
	n, err := removeScript.Run(ctx, cfg.Client, []string{k.failed, k.job(id), k.job(id) + ":logs", k.events, k.meta}, id, k.base).Int()
	return adminResult("bullmq.RemoveJob", queue, id, n, err)
}

func adminResult(op, queue, id string, n int, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s %s/%s: %w", op, queue, id, err)
	case n == -1:
		return fmt.Errorf("%s %s/%s: %w", op, queue, id, ErrJobNotFound)
	case n == -2:
		return fmt.Errorf("%s %s/%s: %w", op, queue, id, ErrJobNotFailed)
	}
	return nil
}

func adminKeys(cfg Config, queue string) (queueKeys, error) {
	if cfg.Client == nil {
		return queueKeys{}, errors.New("Config.Client is required")
	}
	if queue == "" {
		return queueKeys{}, errors.New("queue is required")
	}
	return cfg.keys(queue), nil
}
