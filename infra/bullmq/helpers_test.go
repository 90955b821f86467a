package bullmq_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
)

func redisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// newRedis returns a client closed at the end of the test. Redis is
// required: a failing PING fails the test.
func newRedis(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redisURL())
	require.NoError(t, err)
	opt.PoolSize = 200
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, rdb.Ping(ctx).Err(), "Redis at %s", redisURL())
	return rdb
}

// redisTarget tells child processes (Node.js scripts, Go workers) which Redis to use:
// REDIS_URL, or the nodes of a cluster.
type redisTarget struct {
	cluster []string // empty: REDIS_URL
}

// env is the environment of a child process: REDIS_URL, plus REDIS_CLUSTER_ADDRS on a
// cluster (the harness then connects with ioredis Cluster).
func (r redisTarget) env() []string {
	env := append(os.Environ(), "REDIS_URL="+redisURL())
	if len(r.cluster) > 0 {
		env = append(env, "REDIS_CLUSTER_ADDRS="+strings.Join(r.cluster, ","))
	}
	return env
}

// newQueue returns a unique queue name whose keys are deleted after the test.
func newQueue(t testing.TB, rdb *redis.Client, prefix string) string {
	t.Helper()
	q := "t" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	t.Cleanup(func() { deleteQueue(rdb, prefix, q) })
	return q
}

func deleteQueue(rdb *redis.Client, prefix, q string) {
	ctx := context.Background()
	pattern := prefix + ":" + q + ":*"
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			rdb.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
}

func baseConfig(rdb *redis.Client) bullmq.Config {
	return bullmq.Config{Client: rdb}
}

// behaviour is the job data both the Go handler and worker.mjs obey.
type behaviour struct {
	EventID     string `json:"event_id,omitempty"`
	WorkspaceID string `json:"workspace_id,omitempty"`
	Behave      string `json:"behave,omitempty"`
	FailUntil   int    `json:"failUntil,omitempty"`
	SleepMs     int    `json:"sleepMs,omitempty"`
	HoldFirstMs int    `json:"holdFirstMs,omitempty"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// behaveHandler mirrors worker.mjs; onStart is called when an attempt starts.
func behaveHandler(onStart func(j *bullmq.Job)) bullmq.HandlerFunc {
	return func(ctx context.Context, j *bullmq.Job) (any, error) {
		if onStart != nil {
			onStart(j)
		}
		var b behaviour
		if err := json.Unmarshal(j.Data, &b); err != nil {
			return nil, bullmq.Unrecoverable(err)
		}
		if b.HoldFirstMs > 0 && j.AttemptsStarted <= 1 {
			select {
			case <-time.After(time.Duration(b.HoldFirstMs) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if b.SleepMs > 0 {
			time.Sleep(time.Duration(b.SleepMs) * time.Millisecond)
		}
		switch b.Behave {
		case "fail":
			return nil, fmt.Errorf("boom %s", j.ID)
		case "unrecoverable":
			return nil, bullmq.Unrecoverable(fmt.Errorf("fatal %s", j.ID))
		case "failUntil":
			if j.AttemptsMade < b.FailUntil {
				return nil, fmt.Errorf("not yet %d", j.AttemptsMade)
			}
		}
		return map[string]any{"by": "go", "id": j.ID, "attempt": j.AttemptsMade}, nil
	}
}

// runWorker runs w until the test ends (or stop is called) and returns stop.
func runWorker(t testing.TB, w *bullmq.Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("worker did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it is true or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---- Node.js harness ----

var (
	npmOnce sync.Once
	npmErr  error
)

func nodeDir() string {
	d, _ := filepath.Abs(filepath.Join("..", "..", "tests", "bullmqnode"))
	return d
}

// requireNode skips the test when node is absent and installs the harness
// with npm ci when node_modules is missing.
func requireNode(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the Node.js BullMQ interop tests need it (CI has it)")
	}
	npmOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(nodeDir(), "node_modules", "bullmq", "package.json")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = nodeDir()
		out, err := cmd.CombinedOutput()
		if err != nil {
			npmErr = fmt.Errorf("npm ci in %s: %w\n%s", nodeDir(), err, out)
		}
	})
	require.NoError(t, npmErr)
}

// runNode runs a harness script on target to completion and returns its last stdout line.
func runNode(t testing.TB, target redisTarget, script string, cfg any, stdin any) []byte {
	t.Helper()
	requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, string(mustJSON(cfg)))
	cmd.Dir = nodeDir()
	cmd.Env = target.env()
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(mustJSON(stdin))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node %s: %s", script, stderr.String())
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	return lines[len(lines)-1]
}

type nodeReport struct {
	Counts map[string]int            `json:"counts"`
	Events map[string]int            `json:"events"`
	PerJob map[string]map[string]int `json:"perJob"`
	Jobs   map[string]*nodeJob       `json:"jobs"`
}

type nodeJob struct {
	State           string          `json:"state"`
	Name            string          `json:"name"`
	Data            json.RawMessage `json:"data"`
	AttemptsMade    int             `json:"attemptsMade"`
	AttemptsStarted int             `json:"attemptsStarted"`
	ReturnValue     json.RawMessage `json:"returnvalue"`
	FailedReason    string          `json:"failedReason"`
	Stacktrace      []string        `json:"stacktrace"`
	FinishedOn      int64           `json:"finishedOn"`
	ProcessedOn     int64           `json:"processedOn"`
	Opts            map[string]any  `json:"opts"`
}

// report is what Node.js BullMQ sees of queue (its name in Redis) on the single Redis.
func report(t testing.TB, prefix, queue string, ids []string) nodeReport {
	t.Helper()
	return reportOn(t, redisTarget{}, prefix, queue, ids)
}

// report is what Node.js BullMQ sees of b's queue.
func (b bundle) report(t testing.TB, ids []string) nodeReport {
	t.Helper()
	return reportOn(t, b.redis, "bull", b.cfg.QueueName(b.queue), ids)
}

func reportOn(t testing.TB, target redisTarget, prefix, queue string, ids []string) nodeReport {
	t.Helper()
	var r nodeReport
	line := runNode(t, target, "report.mjs", map[string]any{"queue": queue, "prefix": prefix, "ids": ids, "idleMs": 300}, nil)
	require.NoError(t, json.Unmarshal(line, &r), string(line))
	return r
}

// nodeAdd adds jobs with Node.js Queue.add or addBulk and returns their ids.
func nodeAdd(t testing.TB, prefix, queue, mode string, jobs []map[string]any) []string {
	t.Helper()
	return nodeAddOn(t, redisTarget{}, prefix, queue, mode, jobs)
}

// nodeAdd adds jobs to b's queue with Node.js.
func (b bundle) nodeAdd(t testing.TB, mode string, jobs []map[string]any) []string {
	t.Helper()
	return nodeAddOn(t, b.redis, "bull", b.cfg.QueueName(b.queue), mode, jobs)
}

func nodeAddOn(t testing.TB, target redisTarget, prefix, queue, mode string, jobs []map[string]any) []string {
	t.Helper()
	var r struct {
		IDs []string `json:"ids"`
	}
	line := runNode(t, target, "producer.mjs", map[string]any{"queue": queue, "prefix": prefix, "mode": mode}, jobs)
	require.NoError(t, json.Unmarshal(line, &r), string(line))
	return r.IDs
}

// proc is a long-running child process printing JSON lines.
type proc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []map[string]any
	done  chan struct{}
}

func startProc(t testing.TB, cmd *exec.Cmd, readyEv string) *proc {
	t.Helper()
	p := &proc{cmd: cmd, done: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	ready := make(chan struct{})
	var readyOnce sync.Once
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			p.mu.Lock()
			p.lines = append(p.lines, m)
			p.mu.Unlock()
			if m["ev"] == readyEv {
				readyOnce.Do(func() { close(ready) })
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("%s exited before ready: %s", cmd.Path, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready: %s", cmd.Path, stderr.String())
	}
	return p
}

func (p *proc) count(ev, id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.lines {
		if m["ev"] == ev && (id == "" || m["id"] == id) {
			n++
		}
	}
	return n
}

// stop sends SIGTERM and waits for exit.
func (p *proc) stop(t testing.TB) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Error("process did not stop on SIGTERM")
		_ = p.cmd.Process.Kill()
	}
}

// kill sends SIGKILL and waits for exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// startNodeWorker starts worker.mjs with cfg on the single Redis.
func startNodeWorker(t testing.TB, cfg map[string]any) *proc {
	t.Helper()
	return startNodeWorkerOn(t, redisTarget{}, cfg)
}

// startNodeWorker starts worker.mjs on b's queue, with cfg's other settings.
func (b bundle) startNodeWorker(t testing.TB, cfg map[string]any) *proc {
	t.Helper()
	c := map[string]any{"queue": b.cfg.QueueName(b.queue), "prefix": "bull"}
	for k, v := range cfg {
		c[k] = v
	}
	return startNodeWorkerOn(t, b.redis, c)
}

func startNodeWorkerOn(t testing.TB, target redisTarget, cfg map[string]any) *proc {
	t.Helper()
	requireNode(t)
	cmd := exec.Command("node", "worker.mjs", string(mustJSON(cfg)))
	cmd.Dir = nodeDir()
	cmd.Env = target.env()
	return startProc(t, cmd, "ready")
}
