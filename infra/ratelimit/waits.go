package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// WaitLog counts, in Redis, the waits of jobs whose store was over its budget, per minute and
// platform: one hash per minute (Prefix + "waits:" + the Unix minute, a field per platform),
// kept WaitLogKeep. Every worker process adds to the same hashes, so that a process that runs
// no job (the operator console) can show them; the workers' own Prometheus counter
// (listing_store_rate_waits_total) counts the same waits per process. Minutes are those of the
// adding process's clock. Safe for concurrent use.
type WaitLog struct {
	Client redis.UniversalClient
	// Prefix starts every key, e.g. "listing:rate:" (the buckets' prefix). Required.
	Prefix string
}

// WaitLogKeep is how long a minute's hash is kept.
const WaitLogKeep = 2 * time.Hour

func (w WaitLog) key(minute int64) string { return w.Prefix + "waits:" + strconv.FormatInt(minute, 10) }

// Add counts one wait of platform at at: one round trip (a pipelined HINCRBY and EXPIRE).
func (w WaitLog) Add(ctx context.Context, platform string, at time.Time) error {
	k := w.key(at.Unix() / 60)
	pipe := w.Client.Pipeline()
	pipe.HIncrBy(ctx, k, platform, 1)
	pipe.Expire(ctx, k, WaitLogKeep)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("ratelimit.WaitLog.Add: %w", err)
	}
	return nil
}

// Recent returns the waits per platform of the minutes minutes ending with now's (now's
// minute so far and the minutes-1 before it), in one round trip. minutes is at most
// WaitLogKeep's.
func (w WaitLog) Recent(ctx context.Context, now time.Time, minutes int) (map[string]int64, error) {
	minutes = min(max(minutes, 1), int(WaitLogKeep/time.Minute))
	last := now.Unix() / 60
	pipe := w.Client.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, 0, minutes)
	for m := last - int64(minutes) + 1; m <= last; m++ {
		cmds = append(cmds, pipe.HGetAll(ctx, w.key(m)))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("ratelimit.WaitLog.Recent: %w", err)
	}
	out := map[string]int64{}
	for _, c := range cmds {
		for platform, v := range c.Val() {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("ratelimit.WaitLog.Recent: %s: %w", platform, err)
			}
			out[platform] += n
		}
	}
	return out, nil
}
