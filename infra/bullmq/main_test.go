package bullmq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/internal/redistest"
)

// childEnv switches the test binary into a standalone Go worker process, so
// kill tests can SIGKILL a real process that holds a job.
const childEnv = "BULLMQ_TEST_CHILD_WORKER"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(childWorker(cfg))
	}
	os.Exit(redistest.Main(m))
}

type childConfig struct {
	Queue           string `json:"queue"`
	Prefix          string `json:"prefix"`
	QueueHashTags   bool   `json:"queueHashTags"`
	Concurrency     int    `json:"concurrency"`
	LockMs          int    `json:"lockMs"`
	StalledMs       int    `json:"stalledMs"`
	MaxStalledCount int    `json:"maxStalledCount"`
}

func childWorker(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var rdb redis.UniversalClient = redis.NewClient(opt)
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	}
	defer rdb.Close()
	var mu sync.Mutex
	emit := func(v map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(v)
		fmt.Println(string(b))
	}
	w, err := bullmq.NewWorker(bullmq.WorkerConfig{
		Config:          bullmq.Config{Client: rdb, Prefix: cfg.Prefix, QueueHashTags: cfg.QueueHashTags},
		Queue:           cfg.Queue,
		Concurrency:     cfg.Concurrency,
		LockDuration:    time.Duration(cfg.LockMs) * time.Millisecond,
		StalledInterval: time.Duration(cfg.StalledMs) * time.Millisecond,
		MaxStalledCount: cfg.MaxStalledCount,
		DrainDelay:      200 * time.Millisecond,
	}, behaveHandler(func(j *bullmq.Job) {
		emit(map[string]any{"ev": "start", "id": j.ID, "attemptsMade": j.AttemptsMade})
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	emit(map[string]any{"ev": "ready"})
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func startGoChild(t testing.TB, target redisTarget, cfg childConfig) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(target.env(), childEnv+"="+string(mustJSON(cfg)))
	return startProc(t, cmd, "ready")
}
