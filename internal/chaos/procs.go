package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// proc is one child of bin/app, kept running by its supervisor: when it exits (killed by the
// chaos or on its own) it is started again, after a random delay of up to -restart-delay
// when the chaos killed it, after one second otherwise (counted as an unexpected exit).
type proc struct {
	h       *harness
	name    string
	args    []string
	env     []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current incarnation exited
	killed  bool          // the current incarnation was killed by the chaos
	stopped bool          // the run is over: do not restart

	starts     atomic.Int64
	unexpected atomic.Int64
}

func (h *harness) newProc(name string, env map[string]string, args ...string) *proc {
	p := &proc{h: h, name: name, args: args, logPath: filepath.Join(h.o.dir, name+".log")}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !hasKey(env, k) {
			p.env = append(p.env, kv)
		}
	}
	for k, v := range env {
		p.env = append(p.env, k+"="+v)
	}
	return p
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// start starts one incarnation; its output is appended to the child's log file.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== chaos: start %s #%d at %s\n", p.name, p.starts.Load()+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.h.bin, p.args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = p.env, f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.starts.Add(1)
	p.cmd, p.done, p.killed = cmd, make(chan struct{}), false
	done := p.done
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== chaos: %s exited at %s: %v\n", p.name, time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		close(done)
	}()
	return nil
}

// supervise restarts the child whenever it exits, until stop.
func (p *proc) supervise() {
	for {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		<-done
		p.mu.Lock()
		stopped, killed := p.stopped, p.killed
		p.mu.Unlock()
		if stopped {
			return
		}
		delay := time.Second
		if killed {
			delay = p.h.restartDelay()
		} else {
			p.unexpected.Add(1)
			p.h.log.Warn("child exited on its own; restarting", "child", p.name, "log", p.logPath)
		}
		time.Sleep(delay)
		p.mu.Lock()
		stopped = p.stopped
		p.mu.Unlock()
		if stopped {
			return
		}
		if err := p.start(); err != nil {
			p.h.log.Error("restart failed", "child", p.name, "err", err)
			time.Sleep(time.Second)
			// The next loop waits on the old, closed done channel and tries again.
		}
	}
}

// kill SIGKILLs the running incarnation (no shutdown of any kind); the supervisor restarts
// it. It reports false when the child was not running.
func (p *proc) kill() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	return true
}

// running reports whether an incarnation is running.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stopWait is how long a child may take to stop after SIGTERM: the workers' stop bound
// (WORKER_STOP_TIMEOUT, whose default the harness keeps) and a margin.
const stopWait = 90 * time.Second

// stop ends the child for good: SIGTERM, then SIGKILL after the stop bound and a margin
// (stopWait).
func (p *proc) stop() {
	p.mu.Lock()
	p.stopped = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopWait):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// redisServer is the harness's own Redis, without persistence.
type redisServer struct {
	port int
	dir  string
}

func (r *redisServer) url() string { return "redis://127.0.0.1:" + strconv.Itoa(r.port) + "/0" }

func (r *redisServer) cli(args ...string) (string, error) {
	out, err := exec.Command("redis-cli", append([]string{"-p", strconv.Itoa(r.port)}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// start starts a fresh, empty server and waits until it answers PING.
func (r *redisServer) start(ctx context.Context) error {
	out, err := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "yes", "--dir", r.dir,
		"--pidfile", filepath.Join(r.dir, "redis.pid"), "--logfile", filepath.Join(r.dir, "redis.log")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-server: %v: %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pong, err := r.cli("ping"); err == nil && pong == "PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d did not answer PING", r.port)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// shutdown stops the server without saving anything: every job is lost.
func (r *redisServer) shutdown() {
	_, _ = r.cli("shutdown", "nosave")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := r.cli("ping"); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
