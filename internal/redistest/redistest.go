// Package redistest starts a local Redis Cluster for tests: three masters (no replicas) on
// free ports of 127.0.0.1, made of redis-server and redis-cli as installed on the machine,
// without persistence. A test binary shares one cluster: Shared starts it on first use, and
// Main, called from the package's TestMain, stops it when the tests end. The servers are
// children of the test binary and die with it, even when it is killed.
//
// When REDIS_TEST_CLUSTER_ADDRS ("host:port,…") is set, Shared uses that cluster instead and
// never stops it (CI may start one cluster for every package).
//
// URL and NewClient give the tests the single server they share (REDIS_URL).
package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvAddrs names the environment variable that points Shared at a running cluster.
const EnvAddrs = "REDIS_TEST_CLUSTER_ADDRS"

// Nodes is how many masters Start creates.
const Nodes = 3

// Cluster is a running Redis Cluster.
type Cluster struct {
	// Addrs are the nodes, "127.0.0.1:port".
	Addrs []string

	dir  string
	pids []int
	stop chan struct{} // closed by Stop: the goroutine owning the servers kills them
	done chan struct{} // closed once they are gone
}

// Start starts a three-node cluster and waits until every node reports cluster_state:ok.
// The caller stops it with Stop. Its servers die with the calling process.
func Start(ctx context.Context) (*Cluster, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("redistest: %s is not installed: %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, stop: make(chan struct{}), done: make(chan struct{})}
	ports, err := freePorts(Nodes)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	for _, p := range ports {
		c.Addrs = append(c.Addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	started := make(chan error, 1)
	go c.own(ports, started)
	if err := <-started; err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.create(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// own starts the servers on a goroutine locked to its OS thread, so that PR_SET_PDEATHSIG
// (sent when the thread that started a child exits) fires only when the process dies or
// Stop lets this goroutine end; it then kills and reaps them.
func (c *Cluster) own(ports []int, started chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
	defer close(c.done)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		_ = os.RemoveAll(c.dir)
	}()
	for _, port := range ports {
		nodeDir := filepath.Join(c.dir, strconv.Itoa(port))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			started <- err
			return
		}
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
			"--cluster-node-timeout", "5000", "--dir", nodeDir, "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--logfile", filepath.Join(nodeDir, "redis.log"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("redistest: redis-server on %d: %w", port, err)
			return
		}
		procs = append(procs, cmd)
		c.pids = append(c.pids, cmd.Process.Pid)
	}
	started <- nil
	<-c.stop
}

// create joins the nodes with redis-cli --cluster create and waits for cluster_state:ok on
// every node.
func (c *Cluster) create(ctx context.Context) error {
	for _, a := range c.Addrs {
		if err := waitFor(ctx, 10*time.Second, func() error { return ping(ctx, a) }); err != nil {
			return fmt.Errorf("redistest: node %s did not start (%s): %w", a, c.dir, err)
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, a := range c.Addrs {
		err := waitFor(ctx, 30*time.Second, func() error {
			rdb := redis.NewClient(&redis.Options{Addr: a})
			defer rdb.Close()
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return errors.New("cluster_state is not ok")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("redistest: node %s: %w", a, err)
		}
	}
	return nil
}

// Stop kills the servers and removes their files. It is idempotent; a cluster found through
// REDIS_TEST_CLUSTER_ADDRS is left running.
func (c *Cluster) Stop() {
	if c.stop == nil {
		return
	}
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// PIDs returns the process ids of the servers Start started, in the order of Addrs (none for
// a cluster found through REDIS_TEST_CLUSTER_ADDRS).
func (c *Cluster) PIDs() []int { return append([]int(nil), c.pids...) }

// Client returns a new cluster client of c, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, PoolSize: 50})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// NodeOf returns the address of the master serving key.
func NodeOf(ctx context.Context, rdb *redis.ClusterClient, key string) (string, error) {
	n, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	return n.Options().Addr, nil
}

// DeleteKeys deletes every key matching pattern (a SCAN MATCH pattern): on every master of a
// *redis.ClusterClient, else on rdb.
func DeleteKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) error {
	del := func(ctx context.Context, n redis.UniversalClient) error {
		iter := n.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if err := n.Unlink(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
	}
	return del(ctx, rdb)
}

var shared struct {
	sync.Mutex
	c   *Cluster
	err error
}

// Shared returns the test binary's cluster, started on first use (or found through
// REDIS_TEST_CLUSTER_ADDRS); a failure to start fails t. Call Main from TestMain to stop it.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.c == nil && shared.err == nil {
		if env := os.Getenv(EnvAddrs); env != "" {
			shared.c = &Cluster{Addrs: strings.Split(env, ",")}
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			shared.c, shared.err = Start(ctx)
			cancel()
		}
	}
	if shared.err != nil {
		t.Fatalf("starting a Redis Cluster: %v", shared.err)
	}
	return shared.c
}

// Main runs the tests, then stops the shared cluster if Shared started one, and returns the
// exit code: func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	shared.Lock()
	if shared.c != nil {
		shared.c.Stop()
	}
	shared.Unlock()
	return code
}

// freePorts returns n ports p, each free with its cluster bus port p+10000, chosen at random
// in [20000, 30000) so that test binaries running at once rarely collide.
func freePorts(n int) ([]int, error) {
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n && tries < 200; tries++ {
		p := 20000 + rand.IntN(10000)
		if seen[p] || !free(p) || !free(p+10000) {
			continue
		}
		seen[p] = true
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, errors.New("redistest: no free ports")
	}
	return ports, nil
}

func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ping answers whether addr serves Redis; a closed port is told without go-redis (which
// would log the refused dial).
func ping(ctx context.Context, addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	_ = conn.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	return rdb.Ping(ctx).Err()
}

func waitFor(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
