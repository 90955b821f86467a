package tests

// Process harness of the acceptance tests of seed_test.go: the `app` binary, built once per test
// binary, run as child processes that a test can SIGKILL at the point where a crash is the
// point of the test.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

var (
	seedBuildOnce sync.Once
	seedBuildPath string
	seedBuildErr  error
	seedBuildOut  []byte
)

// seedBinary builds ./cmd/app once per test binary and returns its path. The binary lives in
// a directory of its own under the system temp directory: it outlives the first test that
// asked for it, is reused by the others, and TestMain removes it when the tests end.
func seedBinary(t testing.TB) string {
	t.Helper()
	seedBuildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "seed-app-")
		if err != nil {
			seedBuildErr = err
			return
		}
		seedBuildPath = filepath.Join(dir, "app")
		cmd := exec.Command("go", "build", "-o", seedBuildPath, "./cmd/app")
		cmd.Dir = ".." // the module root
		seedBuildOut, seedBuildErr = cmd.CombinedOutput()
	})
	require.NoError(t, seedBuildErr, "go build ./cmd/app: %s", seedBuildOut)
	return seedBuildPath
}

// seedFreeAddr returns a loopback address whose port was free a moment ago.
func seedFreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// seedRandom returns n random bytes in hex.
func seedRandom(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// seedPrefix is a BullMQ prefix of the calling test's own.
func seedPrefix() string { return "seed" + seedRandom(6) }

// seedRedisURL is the Redis of the queues (REDIS_URL or the development default).
func seedRedisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// seedRedis opens a Redis client for t and deletes every key under prefix when t ends.
func seedRedis(t testing.TB, prefix string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(seedRedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() {
		// Bounded: a Redis that stopped answering must not hang the test binary.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+":*", 500).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		_ = rdb.Close()
	})
	return rdb
}

// seedProc is one child process of the app binary.
type seedProc struct {
	name string
	cmd  *exec.Cmd
	out  *seedBuffer
	done chan struct{}
}

// seedEnv is the environment every child shares: the test database as app_user, the
// test's Redis prefix, development defaults for the rest.
func seedEnv(appURL, prefix string, extra map[string]string) map[string]string {
	env := map[string]string{
		"APP_ENV":              "development",
		"DATABASE_URL":         appURL,
		"DATABASE_MAX_CONNS":   "8",
		"REDIS_URL":            seedRedisURL(),
		"BULLMQ_PREFIX":        prefix,
		"STREAM_PREFIX":        prefix, // the integration streams, deleted with the queues
		"LOG_FORMAT":           "text",
		"LOG_LEVEL":            "info",
		"AUTH_RATE_PER_MINUTE": "1000",
		"JOB_ATTEMPTS":         "3",
		"PLATFORM_BASE_URL":    "",
		"AI_BASE_URL":          "",
		"S3_BUCKET":            "",
		// `all` also serves the operator console: on a free port, as the test database's
		// listing_operator.
		"CONSOLE_ADDR":          "127.0.0.1:0",
		"OPERATOR_DATABASE_URL": strings.Replace(appURL, "app_user@", "listing_operator@", 1),
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// seedStartProc starts `app <args...>` with env on top of this process's environment (keys
// of env replace inherited ones). When t ends the child gets SIGTERM, then SIGKILL after
// seedStopWait; its output is logged when t failed.
func seedStartProc(t testing.TB, name string, env map[string]string, args ...string) *seedProc {
	t.Helper()
	cmd := exec.Command(seedBinary(t), args...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !seedHasKey(env, k) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if _, ok := env["STORAGE_DIR"]; !ok {
		cmd.Env = append(cmd.Env, "STORAGE_DIR="+t.TempDir())
	}
	p := &seedProc{name: name, cmd: cmd, out: &seedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start(), "start %s", name)
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- output of %s (%s) ---\n%s", name, strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

func seedHasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// kill sends SIGKILL (no shutdown of any kind) and waits until the child is gone.
func (p *seedProc) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "child did not die", p.name)
	}
}

// seedStopWait is how long a child may take to stop after SIGTERM: the workers' stop bound
// (WORKER_STOP_TIMEOUT, default 75s: calls in flight finish and are recorded) and a margin.
const seedStopWait = 90 * time.Second

// stop ends the child gracefully if it still runs (SIGTERM, then SIGKILL after seedStopWait).
func (p *seedProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(seedStopWait):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// waitLog waits until the child has written substr (or fails t after 30 s, or when the
// child exits first).
func (p *seedProc) waitLog(t testing.TB, substr string) {
	t.Helper()
	seedEventually(t, 30*time.Second, func() bool {
		select {
		case <-p.done:
			require.FailNow(t, "child exited", "%s: %s", p.name, p.out.String())
		default:
		}
		return strings.Contains(p.out.String(), substr)
	}, "%s never logged %q", p.name, substr)
}

// seedStartServe starts `app serve` on a free port and waits until /readyz answers 200.
// It returns the child and its base URL.
func seedStartServe(t testing.TB, appURL, prefix string) (*seedProc, string) {
	t.Helper()
	addr := seedFreeAddr(t)
	base := "http://" + addr
	p := seedStartProc(t, "serve", seedEnv(appURL, prefix, map[string]string{"HTTP_ADDR": addr, "PUBLIC_BASE_URL": base}), "serve")
	seedWaitHTTP(t, p, base+"/readyz")
	return p, base
}

// seedStartWork starts `app work`. Without PLATFORM_BASE_URL in extra it starts its own
// marketplace sandbox on a free port, whose base URL is returned ("" otherwise).
func seedStartWork(t testing.TB, appURL, prefix string, extra map[string]string) (*seedProc, string) {
	t.Helper()
	mp := seedFreeAddr(t)
	env := seedEnv(appURL, prefix, map[string]string{"SANDBOX_MARKETPLACE_ADDR": mp, "SANDBOX_AI_ADDR": seedFreeAddr(t)})
	for k, v := range extra {
		env[k] = v
	}
	p := seedStartProc(t, "work", env, "work")
	if env["PLATFORM_BASE_URL"] != "" {
		if env["AI_BASE_URL"] != "" {
			p.waitLog(t, "msg=started")
		} else {
			p.waitLog(t, "AI sandbox started")
		}
		return p, ""
	}
	seedWaitHTTP(t, p, "http://"+mp+"/_sandbox/stats")
	return p, "http://" + mp
}

// seedStartDispatch starts `app dispatch` and waits until it runs.
func seedStartDispatch(t testing.TB, appURL, prefix string) *seedProc {
	t.Helper()
	p := seedStartProc(t, "dispatch", seedEnv(appURL, prefix, nil), "dispatch")
	p.waitLog(t, "outbox dispatcher started")
	return p
}

// seedWaitHTTP waits until GET url answers 200.
func seedWaitHTTP(t testing.TB, p *seedProc, url string) {
	t.Helper()
	seedEventually(t, 30*time.Second, func() bool {
		select {
		case <-p.done:
			require.FailNow(t, "child exited", "%s: %s", p.name, p.out.String())
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "%s never answered %s", p.name, url)
}

// seedMarketplaceStats reads GET /_sandbox/stats of a marketplace sandbox.
type seedMarketplaceStats struct {
	Calls                 map[string]int `json:"calls"`
	ProductsByExternalRef map[string]int `json:"products_by_external_ref"`
	ProductsCreated       int            `json:"products_created"`
}

func seedSandboxStats(t testing.TB, base string) seedMarketplaceStats {
	t.Helper()
	resp, err := http.Get(base + "/_sandbox/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st seedMarketplaceStats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// seedEventually polls cond every 20 ms until it holds, or fails t after timeout.
func seedEventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNowf(t, "condition not met in time", msg, args...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// seedBuffer is a goroutine-safe output buffer.
type seedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *seedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *seedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
