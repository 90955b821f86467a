package bullmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Job states counted by QueueCounts, named as Node.js BullMQ's Queue.getJobCounts names them
// (StateWaiting is the "wait" list).
const (
	StateWaiting         = "waiting"
	StateActive          = "active"
	StatePrioritized     = "prioritized"
	StateDelayed         = "delayed"
	StateCompleted       = "completed"
	StateFailed          = "failed"
	StateWaitingChildren = "waiting-children"
)

// JobStates returns the states QueueCounts reports, in a fixed order.
func JobStates() []string {
	return []string{StateWaiting, StateActive, StatePrioritized, StateDelayed, StateCompleted, StateFailed, StateWaitingChildren}
}

// QueueCounts returns the number of jobs in each state of queue (every
// state of JobStates, zero for a missing key), read in one pipelined round
// trip: LLEN of wait and active, ZCARD of the other sets. Only cfg.Client,
// cfg.Prefix (default DefaultPrefix) and cfg.QueueHashTags are used. The counts are read without a
// transaction: a job moving between states during the call may be counted
// twice or not at all. Safe for concurrent use.
func QueueCounts(ctx context.Context, cfg Config, queue string) (map[string]int64, error) {
	if cfg.Client == nil {
		return nil, errors.New("bullmq.QueueCounts: Config.Client is required")
	}
	if queue == "" {
		return nil, errors.New("bullmq.QueueCounts: queue is required")
	}
	k := cfg.keys(queue)
	cmds := make(map[string]*redis.IntCmd, 7)
	_, err := cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmds[StateWaiting] = p.LLen(ctx, k.wait)
		cmds[StateActive] = p.LLen(ctx, k.active)
		cmds[StatePrioritized] = p.ZCard(ctx, k.prioritized)
		cmds[StateDelayed] = p.ZCard(ctx, k.delayed)
		cmds[StateCompleted] = p.ZCard(ctx, k.completed)
		cmds[StateFailed] = p.ZCard(ctx, k.failed)
		cmds[StateWaitingChildren] = p.ZCard(ctx, k.base+"waiting-children")
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bullmq.QueueCounts %s: %w", queue, err)
	}
	counts := make(map[string]int64, len(cmds))
	for state, c := range cmds {
		counts[state] = c.Val()
	}
	return counts, nil
}

// JobsUnfinished reports, for each id, whether queue holds that job unfinished: waiting,
// delayed, prioritized or active (its hash exists without finishedOn). A job that completed,
// failed for good, or is gone (removed, trimmed, lost with Redis) is not unfinished. One
// round trip; the answer is a snapshot.
func JobsUnfinished(ctx context.Context, cfg Config, queue string, ids []string) (map[string]bool, error) {
	if cfg.Client == nil {
		return nil, errors.New("bullmq.JobsUnfinished: Config.Client is required")
	}
	k := cfg.keys(queue)
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err := cfg.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, k.job(id), "name", "finishedOn")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bullmq.JobsUnfinished: %w", err)
	}
	out := make(map[string]bool, len(ids))
	for i, id := range ids {
		v := cmds[i].Val()
		out[id] = len(v) == 2 && v[0] != nil && v[1] == nil
	}
	return out, nil
}

// OldestWaiting returns when the job that has waited longest in queue's wait list was added
// (the list's tail: the next to be taken), and false when nothing waits. Two round trips;
// the answer is a snapshot.
func OldestWaiting(ctx context.Context, cfg Config, queue string) (time.Time, bool, error) {
	if cfg.Client == nil {
		return time.Time{}, false, errors.New("bullmq.OldestWaiting: Config.Client is required")
	}
	k := cfg.keys(queue)
	id, err := cfg.Client.LIndex(ctx, k.wait, -1).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("bullmq.OldestWaiting: %w", err)
	}
	ts, err := cfg.Client.HGet(ctx, k.job(id), "timestamp").Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil // taken or removed meanwhile
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("bullmq.OldestWaiting: %w", err)
	}
	return msTime(ts), true, nil
}
