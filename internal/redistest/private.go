package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Private is a redis-server of one test (no persistence) that the test may pause (SIGSTOP)
// and resume without pausing anybody else's Redis. It is resumed and killed when the test
// ends.
type Private struct {
	// Addr is its address (127.0.0.1:port); URL names its database 0.
	Addr, URL string
	cmd       *exec.Cmd
}

// StartPrivate starts a Private server and waits up to 10 s for it to answer PING.
func StartPrivate(t testing.TB) *Private {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", t.TempDir())
	require.NoError(t, cmd.Start(), "redis-server")
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-done
	})
	p := &Private{Addr: "127.0.0.1:" + port, URL: "redis://127.0.0.1:" + port + "/0", cmd: cmd}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: redis-server on %s did not answer within 10 s", p.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// Pause stops the server (SIGSTOP): its clients' commands hang until Resume.
func (p *Private) Pause(t testing.TB) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP)) }

// Resume continues a paused server (SIGCONT).
func (p *Private) Resume(t testing.TB) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT)) }
