// Command bullmqbench measures, in one run against one Redis, the Go
// publisher against Node.js BullMQ addBulk, and the Go worker against a
// Node.js BullMQ Worker, each moving the same number of jobs, and prints
// the rates and the ratios. See the package documentation of infra/bullmq
// for the command line.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/listingkit/listing/infra/bullmq"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := realMain(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bullmqbench:", err)
		os.Exit(1)
	}
}

type options struct {
	n           int
	batch       int
	concurrency int
	publishers  int
	rounds      int
	cpuprofile  string
	nodeDir     string
	redisURL    string
}

func realMain(ctx context.Context) error {
	var o options
	flag.IntVar(&o.n, "n", 100000, "jobs per measurement")
	flag.IntVar(&o.batch, "batch", 1000, "jobs per Add call (Go) and per addBulk call (Node.js)")
	flag.IntVar(&o.concurrency, "concurrency", 50, "worker concurrency (Go and Node.js)")
	flag.IntVar(&o.publishers, "publishers", 1, "concurrent Add callers of the Go publisher (Node.js addBulk runs sequentially)")
	flag.IntVar(&o.rounds, "rounds", 1, "measurement rounds (fresh queues each); the best rate of each side counts")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the Go side to this file")
	flag.StringVar(&o.nodeDir, "node-dir", "tests/bullmqnode", "the Node.js harness directory")
	flag.StringVar(&o.redisURL, "redis", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL")
	flag.Parse()

	if err := ensureNode(o.nodeDir); err != nil {
		return err
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	opt, err := redis.ParseURL(o.redisURL)
	if err != nil {
		return err
	}
	opt.PoolSize = 4 * o.concurrency
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	data := map[string]any{"event_id": "x", "workspace_id": "w", "event_type": "bench.job", "payload": map[string]any{}}
	fmt.Printf("bullmqbench: %d jobs, batches of %d, %d Go publisher caller(s), worker concurrency %d, %d round(s), Redis %s\n",
		o.n, o.batch, o.publishers, o.concurrency, o.rounds, opt.Addr)
	var best struct{ goAdd, nodeAdd, goRun, nodeRun float64 }
	for round := 1; round <= max(o.rounds, 1); round++ {
		r, err := runRound(ctx, rdb, o, data)
		if err != nil {
			return err
		}
		fmt.Printf("round %d: add Go %.0f/s Node.js %.0f/s; drain Go %.0f/s Node.js %.0f/s\n", round, r.goAdd, r.nodeAdd, r.goRun, r.nodeRun)
		best.goAdd = max(best.goAdd, r.goAdd)
		best.nodeAdd = max(best.nodeAdd, r.nodeAdd)
		best.goRun = max(best.goRun, r.goRun)
		best.nodeRun = max(best.nodeRun, r.nodeRun)
	}
	fmt.Printf("add:   Go publisher %8.0f jobs/s   Node.js addBulk %8.0f jobs/s   ratio %.2fx (target >= 2x)\n",
		best.goAdd, best.nodeAdd, best.goAdd/best.nodeAdd)
	fmt.Printf("drain: Go worker    %8.0f jobs/s   Node.js Worker  %8.0f jobs/s   ratio %.2fx (target >= 1.5x)\n",
		best.goRun, best.nodeRun, best.goRun/best.nodeRun)
	return nil
}

type roundResult struct{ goAdd, nodeAdd, goRun, nodeRun float64 }

// runRound adds n jobs with Go and with Node.js into two fresh queues, then
// drains the Node.js-added queue with the Go worker and the Go-added queue
// with the Node.js worker (same layout, same options). Rates in jobs/s.
func runRound(ctx context.Context, rdb *redis.Client, o options, data map[string]any) (roundResult, error) {
	var r roundResult
	run := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	goQueue, nodeQueue := "bench-go-"+run, "bench-node-"+run
	defer cleanup(rdb, goQueue)
	defer cleanup(rdb, nodeQueue)

	goAdd, err := benchGoAdd(ctx, rdb, goQueue, o, data)
	if err != nil {
		return r, err
	}
	var nodeAdd struct{ N, Ms float64 }
	if err := runNode(ctx, o.nodeDir, "bench-producer.mjs", map[string]any{
		"queue": nodeQueue, "n": o.n, "chunk": o.batch, "data": data, "idPrefix": "n" + run,
		"opts":     map[string]any{"attempts": 3, "backoff": map[string]any{"type": "exponential", "delay": 1000}, "removeOnComplete": bullmq.DefaultKeepCompleted, "removeOnFail": map[string]any{"age": int64(bullmq.DefaultFailedRetention / time.Second)}},
		"dedupTtl": bullmq.DefaultDedupWindow.Milliseconds(),
	}, &nodeAdd); err != nil {
		return r, err
	}
	goRun, err := benchGoWorker(ctx, rdb, nodeQueue, o)
	if err != nil {
		return r, err
	}
	var nodeRun struct{ N, Ms float64 }
	if err := runNode(ctx, o.nodeDir, "bench-worker.mjs", map[string]any{
		"queue": goQueue, "n": o.n, "concurrency": o.concurrency,
	}, &nodeRun); err != nil {
		return r, err
	}
	r.goAdd = float64(o.n) / goAdd.Seconds()
	r.nodeAdd = nodeAdd.N / (nodeAdd.Ms / 1000)
	r.goRun = float64(o.n) / goRun.Seconds()
	r.nodeRun = nodeRun.N / (nodeRun.Ms / 1000)
	return r, nil
}

func benchGoAdd(ctx context.Context, rdb *redis.Client, queue string, o options, data map[string]any) (time.Duration, error) {
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb}}, nil)
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	payload, _ := json.Marshal(data)
	jobs := make([]bullmq.Job, o.n)
	for i := range jobs {
		jobs[i] = bullmq.Job{ID: uuid.NewString(), Name: "bench.job", Data: payload}
	}
	batches := make(chan []bullmq.Job, o.n/o.batch+1)
	for i := 0; i < o.n; i += o.batch {
		batches <- jobs[i:min(i+o.batch, o.n)]
	}
	close(batches)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range max(o.publishers, 1) {
		g.Go(func() error {
			for b := range batches {
				res, err := pub.Add(gctx, queue, b)
				if err != nil {
					return err
				}
				for _, r := range res {
					if r.Status != bullmq.Created {
						return fmt.Errorf("job %s: %s", r.ID, r.Status)
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func benchGoWorker(ctx context.Context, rdb *redis.Client, queue string, o options) (time.Duration, error) {
	var handled atomic.Int64
	var first atomic.Int64
	all := make(chan struct{})
	w, err := bullmq.NewWorker(bullmq.WorkerConfig{
		Config:      bullmq.Config{Client: rdb},
		Queue:       queue,
		Concurrency: o.concurrency,
	}, func(context.Context, *bullmq.Job) (any, error) {
		first.CompareAndSwap(0, time.Now().UnixNano())
		if handled.Add(1) == int64(o.n) {
			close(all)
		}
		return nil, nil
	})
	if err != nil {
		return 0, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	select {
	case <-all:
	case <-ctx.Done():
		cancel()
		<-done
		return 0, ctx.Err()
	}
	completed := "bull:" + queue + ":completed"
	for rdb.ZCard(ctx, completed).Val() < int64(o.n) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(time.Unix(0, first.Load()))
	cancel()
	<-done
	return elapsed, nil
}

func runNode(ctx context.Context, dir, script string, cfg any, out any) error {
	b, _ := json.Marshal(cfg)
	cmd := exec.CommandContext(ctx, "node", script, string(b))
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("node %s: %w: %s", script, err, stderr.String())
	}
	lines := bytes.Split(bytes.TrimSpace(res), []byte("\n"))
	return json.Unmarshal(lines[len(lines)-1], out)
}

func ensureNode(dir string) error {
	if _, err := exec.LookPath("node"); err != nil {
		return errors.New("node is not installed")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "bullmq")); err == nil {
		return nil
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci: %w: %s", err, out)
	}
	return nil
}

func cleanup(rdb *redis.Client, queue string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "bull:"+queue+":*", 5000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) >= 5000 {
			rdb.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
