// Command queuemem measures the Redis memory that finished jobs hold: it adds -n jobs (the
// service's job envelope, the service's job options: JOB_KEEP_COMPLETED completed jobs kept,
// their ids remembered for JOB_RETENTION) to one queue under a prefix of its own, completes
// them with the Go worker, sums MEMORY USAGE over every key of the prefix, prints the figure
// per 100,000 jobs and what a day's volume (-per-day) needs at that retention, and deletes
// its keys.
//
//	go run ./internal/queuemem -n 100000 -retention 90m -keep 1000 -per-day 100000000
//
// REDIS_URL names the Redis (default redis://127.0.0.1:6379/0).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/config"
)

func main() {
	n := flag.Int("n", 100000, "jobs to add and complete")
	retention := flag.Duration("retention", 90*time.Minute, "JOB_RETENTION: how long a job's id keeps deduplicating")
	keep := flag.Int("keep", 1000, "JOB_KEEP_COMPLETED: completed jobs kept per queue")
	perDay := flag.Int("per-day", 10_000_000, "jobs a day, for the steady-state figure")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *n, *retention, *keep, *perDay); err != nil {
		fmt.Fprintln(os.Stderr, "queuemem:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n int, retention time.Duration, keep, perDay int) (err error) {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "queuemem-" + hex.EncodeToString(b)
	defer func() {
		if derr := deleteKeys(context.WithoutCancel(ctx), rdb, prefix); derr != nil && err == nil {
			err = derr
		}
	}()
	const queue = "store-verification"
	cfg := bullmq.Config{Client: rdb, Prefix: prefix, Attempts: 5,
		Backoff:          bullmq.Backoff{Type: bullmq.BackoffExponential, Delay: config.JobBackoff.Milliseconds()},
		RemoveOnComplete: config.Config{JobKeepCompleted: keep}.KeepCompleted(), RemoveOnFailAge: 24 * time.Hour, DedupWindow: retention}
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: cfg}, nil)
	if err != nil {
		return err
	}
	defer pub.Close()

	// A job envelope as the dispatcher writes it (docs/bullmq-wire.md).
	ws := uuid.NewString()
	for i := 0; i < n; i += 500 {
		jobs := make([]bullmq.Job, 0, 500)
		for range min(500, n-i) {
			id, _ := uuid.NewV7()
			data, _ := json.Marshal(map[string]any{
				"event_id": id.String(), "workspace_id": ws, "event_type": "store.verification_requested",
				"payload":        map[string]any{"store_id": uuid.NewString(), "verification_id": uuid.NewString(), "version": 1},
				"occurred_at":    time.Now().UTC().Format(time.RFC3339Nano),
				"correlation_id": hex.EncodeToString(b) + "0123456789abcdef",
				"trace":          map[string]string{"traceparent": "00-" + strings.Repeat("a", 32) + "-" + strings.Repeat("b", 16) + "-01"},
			})
			jobs = append(jobs, bullmq.Job{ID: id.String(), Name: "store.verification_requested", Data: data})
		}
		if _, err := pub.Add(ctx, queue, jobs); err != nil {
			return err
		}
	}

	var done atomic.Int64
	all := make(chan struct{})
	w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: cfg, Queue: queue, Concurrency: 50},
		func(context.Context, *bullmq.Job) (any, error) {
			if done.Add(1) == int64(n) {
				close(all)
			}
			return nil, nil
		})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	select {
	case <-all:
	case <-ctx.Done():
	}
	// Finished: nothing waits or runs any more (a finish is settled after its handler returns).
	base := prefix + ":" + queue + ":"
	for ctx.Err() == nil && rdb.LLen(ctx, base+"wait").Val()+rdb.LLen(ctx, base+"active").Val() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-ran
	if ctx.Err() != nil {
		return ctx.Err()
	}

	kinds := map[string][2]int64{} // kind → keys, bytes
	var total int64
	iter := rdb.Scan(ctx, 0, prefix+":*", 5000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		size, err := rdb.MemoryUsage(ctx, key, 0).Result()
		if err != nil {
			return err
		}
		k := kinds[kindOf(strings.TrimPrefix(key, prefix+":"+queue+":"))]
		k[0]++
		k[1] += size
		kinds[kindOf(strings.TrimPrefix(key, prefix+":"+queue+":"))] = k
		total += size
	}
	if err := iter.Err(); err != nil {
		return err
	}
	info, _ := rdb.Info(ctx, "server").Result()
	version := "?"
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "redis_version:"); ok {
			version = v
		}
	}
	fmt.Printf("queuemem: %d completed jobs, JOB_RETENTION %s, JOB_KEEP_COMPLETED %d, Redis %s, %s\n", n, retention, keep, version, time.Now().UTC().Format("2006-01-02"))
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("  %-14s %8d keys %10.1f MB\n", k, kinds[k][0], float64(kinds[k][1])/1e6)
	}
	per100k := float64(total) / float64(n) * 100000
	resident := float64(perDay) * retention.Hours() / 24
	fmt.Printf("per 100,000 completed jobs: %.1f MB (%.0f B a job)\n", per100k/1e6, float64(total)/float64(n))
	fmt.Printf("%d jobs a day, ids kept %s: %.0f ids resident, %.2f GB (the kept completed jobs included, per job)\n", perDay, retention, resident, resident*float64(total)/float64(n)/1e9)
	return nil
}

// kindOf names a key of the queue by what it holds.
func kindOf(rest string) string {
	switch {
	case strings.HasPrefix(rest, "de:"), strings.HasPrefix(rest, "dd:"):
		return "dedup records"
	case strings.Contains(rest, ":"):
		return "queue structure"
	case uuid.Validate(rest) == nil:
		return "job hashes"
	}
	return "queue structure"
}

func deleteKeys(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+":*", 5000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}
