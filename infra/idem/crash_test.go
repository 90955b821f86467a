package idem_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/idem"
	"github.com/listingkit/listing/infra/postgres"
)

// Environment of the crash child (TestCrashChildProcess).
const (
	envCrashChild = "IDEM_CRASH_CHILD"
	envCrashURL   = "IDEM_CRASH_DB_URL"
	envCrashWS    = "IDEM_CRASH_WORKSPACE"
	envCrashUser  = "IDEM_CRASH_USER"
	envCrashKey   = "IDEM_CRASH_KEY"
	handlerRan    = "IDEM_CHILD_HANDLER_RAN"
)

// TestCrashBeforeCommitLeavesNoRecord runs the bus in a child process (this test binary,
// re-executed), lets the handler write its operation, and SIGKILLs the child before the
// transaction commits. No record and no operation may remain, and the same key then
// executes exactly once.
func TestCrashBeforeCommitLeavesNoRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := uuid.New()

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		envCrashChild+"=1",
		envCrashURL+"="+b.db.AppURL,
		envCrashWS+"="+b.ws.String(),
		envCrashUser+"="+b.user.String(),
		envCrashKey+"="+key.String(),
	)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// Wait for the child's handler to have run (its operation is written, uncommitted).
	ran := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), handlerRan) {
				ran <- nil
				return
			}
		}
		ran <- fmt.Errorf("child ended before its handler ran: %v", sc.Err())
	}()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("child handler did not run within 60s")
	}

	// While the child is stuck before commit, the key is in progress.
	_, err = b.exec(ctx, b.req(key, `{"title":"crash"}`))
	requireCode(t, err, idem.CodeRequestInProgress)

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "child must die by the signal: %v", err)
	require.Equal(t, syscall.SIGKILL, exitErr.Sys().(syscall.WaitStatus).Signal())

	// The server aborts the dead connection's transaction; until it notices, the key may still
	// read as in progress. Then the same key succeeds, once.
	var reply bus.Reply[opResult]
	deadline := time.Now().Add(30 * time.Second)
	for {
		reply, err = b.exec(ctx, b.req(key, `{"title":"crash"}`))
		var de *domain.Error
		if !errors.As(err, &de) || de.Code != idem.CodeRequestInProgress || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err)
	require.False(t, reply.Replayed)
	require.EqualValues(t, 1, b.calls.Load())
	require.Equal(t, 1, countOps(t, b.db, key), "only the parent's operation exists")
	require.Equal(t, 1, countRecords(t, b.db, key))

	again, err := b.exec(ctx, b.req(key, `{"title":"crash"}`))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.EqualValues(t, 1, b.calls.Load())
}

// TestCrashChildProcess is the child of TestCrashBeforeCommitLeavesNoRecord; it does nothing
// unless IDEM_CRASH_CHILD=1. Its handler writes the operation, reports on stdout, and blocks
// until the parent kills the process.
func TestCrashChildProcess(t *testing.T) {
	if os.Getenv(envCrashChild) != "1" {
		t.Skip("helper process for TestCrashBeforeCommitLeavesNoRecord")
	}
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: os.Getenv(envCrashURL), MaxConns: 2})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	guard, err := idem.New(idem.NewStore(), idem.Config{Keys: []idem.Key{testKey("k1", 1)}})
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	b := bus.New(postgres.TxMiddleware(pool), guard.Middleware())
	ws := uuid.MustParse(os.Getenv(envCrashWS))
	user := uuid.MustParse(os.Getenv(envCrashUser))
	key := uuid.MustParse(os.Getenv(envCrashKey))
	h := bus.HandlerFunc[createOp, opResult](func(ctx context.Context, cmd createOp) (opResult, error) {
		r, err := insertOp(ctx, cmd)
		if err != nil {
			return r, err
		}
		fmt.Println(handlerRan)
		_ = os.Stdout.Sync()
		time.Sleep(time.Hour) // the parent kills us here, before the commit
		return r, nil
	})
	_, err = bus.Execute(ctx, b, h, bus.Request[createOp]{
		Command: createOp{Resource: key, Title: `{"title":"crash"}`},
		Actor:   bus.Actor{WorkspaceID: ws, UserID: user},
		Idempotency: &bus.Idempotency{
			Key: key, Method: "POST", Path: "/v1/workspaces/" + ws.String() + "/things",
			Fingerprint: bus.FingerprintInput{Body: []byte(`{"title":"crash"}`),
				Headers: map[string]string{"Content-Type": "application/json"}},
			Render: renderOp,
		},
	})
	t.Fatalf("the child was not killed: %v", err)
}
