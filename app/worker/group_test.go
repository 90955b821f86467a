package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/internal/testwait"
)

// groupWorld is two workspaces' transfers, handled by one flow whose record steps can be
// held until they group: the steps of both workspaces' jobs then commit in shared
// transactions (group commit).
type groupWorld struct {
	l    *lifecycle
	wss  [2]uuid.UUID
	trs  []domain.MaterialTransfer
	jobs []worker.Job
}

// newGroupWorld seeds perWorkspace pending transfers in each of two workspaces (the Env's
// and a second one).
func newGroupWorld(t *testing.T, perWorkspace int) *groupWorld {
	l := newLifecycle(t)
	e := l.env
	w := &groupWorld{l: l, wss: [2]uuid.UUID{e.Workspace, uuid.New()}}
	_, err := e.DB.Owner.Exec(context.Background(), `INSERT INTO workspaces (id, name) VALUES ($1, 'second')`, w.wss[1])
	require.NoError(t, err)
	tr := postgres.Transactor{Pool: e.DB.App}
	for i := range 2 * perWorkspace {
		ws := w.wss[i%2]
		op := domain.NewOperation(ws, e.User, "material_transfer", "material_transfer", uuid.New(), time.Now())
		task := domain.MaterialTransfer{Task: domain.NewTask(op.ResourceID, ws, op.ID, time.Now()),
			SourceURL: "https://example.com/a", MediaID: uuid.New()}
		require.NoError(t, tr.InTx(context.Background(), ws, uuid.Nil, func(ctx context.Context) error {
			if err := e.Deps.Operations.Insert(ctx, op); err != nil {
				return err
			}
			return l.tasks.Insert(ctx, task)
		}))
		job := e.Job(t, task.RequestEvent(), 1, false)
		job.WorkspaceID = ws
		job.CorrelationID = fmt.Sprintf("req-%d", i)
		job.TraceParent = traceparent(i)
		w.trs, w.jobs = append(w.trs, task), append(w.jobs, job)
	}
	return w
}

// load reads transfer i in its workspace.
func (w *groupWorld) load(t *testing.T, i int) domain.MaterialTransfer {
	var v domain.MaterialTransfer
	require.NoError(t, postgres.Transactor{Pool: w.l.env.DB.App}.InTx(context.Background(), w.wss[i%2], uuid.Nil,
		func(ctx context.Context) error {
			var err error
			v, err = w.l.tasks.Get(ctx, w.trs[i].ID)
			return err
		}))
	return v
}

// traceparent is job i's W3C trace context.
func traceparent(i int) string { return fmt.Sprintf("00-%032x-%016x-01", i+1, i+1) }

// jobContext is what the transport gives job's handler: the job's correlation id and trace
// context, for the events it publishes.
func jobContext(ctx context.Context, job worker.Job) context.Context {
	return outbox.WithTraceContext(outbox.WithCorrelationID(ctx, job.CorrelationID), job.TraceParent, "")
}

// groupLeaders is how many group transactions of a pool run at once (postgres.InGroupTx).
const groupLeaders = 2

// handleGrouped handles every job at once with f, whose Call is wrapped so that every
// job's begin step has committed before any record step starts, and whose Record is wrapped
// so that the first groupLeaders record steps hold their transactions until the others
// have queued: those then run in one group. whileHeld, when set, runs while they hold (with
// the ids of the held tasks). It returns each job's error and when its Handle returned, and
// when the held steps were let go.
func (w *groupWorld) handleGrouped(t *testing.T, ctx context.Context, f worker.Flow[domain.MaterialTransfer, struct{}, string],
	whileHeld func(held []uuid.UUID)) (errs []error, ends []time.Time, released time.Time) {
	var called, recording atomic.Int64
	n := int64(len(w.jobs))
	hold := make(chan struct{})
	call, record := f.Call, f.Record
	f.Call = func(cctx context.Context, tr domain.MaterialTransfer, s struct{}, tx worker.Tx) (string, error) {
		called.Add(1)
		for called.Load() < n && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		return call(cctx, tr, s, tx)
	}
	var mu sync.Mutex
	var held []uuid.UUID
	f.Record = func(rctx context.Context, tr *domain.MaterialTransfer, r string) (any, error) {
		if recording.Add(1) <= groupLeaders {
			mu.Lock()
			held = append(held, tr.ID)
			mu.Unlock()
			select {
			case <-hold:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return record(rctx, tr, r)
	}
	errs, ends = make([]error, len(w.jobs)), make([]time.Time, len(w.jobs))
	var wg sync.WaitGroup
	for i, job := range w.jobs {
		wg.Go(func() {
			errs[i] = f.Handle(jobContext(ctx, job), job)
			ends[i] = time.Now()
		})
	}
	require.Eventually(t, func() bool { return recording.Load() >= groupLeaders }, 30*time.Second, time.Millisecond)
	if whileHeld != nil {
		mu.Lock()
		whileHeld(slices.Clone(held))
		mu.Unlock()
	}
	time.Sleep(300 * time.Millisecond) // let the other record steps queue
	released = time.Now()
	close(hold)
	wg.Wait()
	return errs, ends, released
}

// Every outbox row a job's steps write carries that job's own correlation id and trace
// context, also when its step ran in a group transaction with other workspaces' steps
// (16 jobs of each of two workspaces, their record steps held until they group).
func TestGroupedStepsKeepTheirOwnRequestMetadata(t *testing.T) {
	w := newGroupWorld(t, 16)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := w.l.flow(t, func() (string, error) { return "done", nil }, nil)
	f.Call = func(context.Context, domain.MaterialTransfer, struct{}, worker.Tx) (string, error) {
		return "done", nil
	}
	errs, _, _ := w.handleGrouped(t, ctx, f, nil)
	for i, err := range errs {
		require.NoError(t, err, "job %d", i)
	}

	rows, err := w.l.env.DB.Owner.Query(ctx, `SELECT aggregate_id, workspace_id, metadata->>'correlation_id',
		metadata->>'traceparent', xmin::text FROM outbox_events WHERE event_type = 'operation.status_changed'`)
	require.NoError(t, err)
	type meta struct{ ws, corr, tp string }
	got := map[string]meta{}
	txs := map[string]int{}
	for rows.Next() {
		var op, xmin string
		var m meta
		require.NoError(t, rows.Scan(&op, &m.ws, &m.corr, &m.tp, &xmin))
		got[op] = m
		txs[xmin]++
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, len(w.jobs))
	for i, tr := range w.trs {
		require.Equal(t, meta{w.wss[i%2].String(), fmt.Sprintf("req-%d", i), traceparent(i)}, got[tr.OperationID.String()],
			"the finish of job %d (workspace %d)", i, i%2)
	}
	// The record steps did share transactions: the test saw groups, not steps alone.
	require.Less(t, len(txs), len(w.jobs)/2, "transactions of the %d finishes: %v", len(w.jobs), txs)
}

// A step that panics in a group transaction fails alone, as its own error: every other job
// of the group succeeds once, without a second call, and the panicking job goes through
// the error policy (retried: not its last attempt), its panic and stack in its own log line.
func TestGroupedStepPanicIsThatStepsError(t *testing.T) {
	w := newGroupWorld(t, 16)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	calls := map[uuid.UUID]int{}
	var mu sync.Mutex
	f := w.l.flow(t, func() (string, error) { return "done", nil }, nil)
	f.Log = w.l.env.Log
	f.Call = func(_ context.Context, tr domain.MaterialTransfer, _ struct{}, _ worker.Tx) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[tr.ID]++
		return "done", nil
	}
	bad := w.trs[len(w.trs)-3].ID // not one of the held first steps (the panic is then in a group)
	record := f.Record
	f.Record = func(ctx context.Context, tr *domain.MaterialTransfer, r string) (any, error) {
		if tr.ID == bad {
			panic(errors.New("boom in a record step"))
		}
		return record(ctx, tr, r)
	}
	errs, _, _ := w.handleGrouped(t, ctx, f, nil)
	for i, err := range errs {
		if w.trs[i].ID == bad {
			var p *postgres.StepPanic
			require.ErrorAs(t, err, &p, "job %d", i)
			require.False(t, worker.IsPermanent(err), "retried, as any error before the last attempt")
			continue
		}
		require.NoError(t, err, "job %d", i)
	}
	for i, tr := range w.trs {
		require.Equal(t, 1, calls[tr.ID], "calls of job %d", i)
		got := w.load(t, i)
		if tr.ID == bad {
			require.Equal(t, domain.TaskRunning, got.Status)
			continue
		}
		require.Equal(t, domain.TaskSucceeded, got.Status, "job %d", i)
	}
	require.Contains(t, w.l.env.Logs.String(), "boom in a record step")
	require.Contains(t, w.l.env.Logs.String(), "group_test.go", "the panicking step's stack is logged")
}

// A task row of the group locked by another session for longer than the group's lock
// time-out holds up only its own step: the other record steps of the group commit within
// the time-out plus a group's time, the locked one once the lock is let go.
func TestGroupedStepMeetingALockWaitsAlone(t *testing.T) {
	w := newGroupWorld(t, 16)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := w.l.flow(t, func() (string, error) { return "done", nil }, nil)
	f.Call = func(context.Context, domain.MaterialTransfer, struct{}, worker.Tx) (string, error) {
		return "done", nil
	}
	const lockFor = 3 * time.Second
	locked := -1
	var unlocked time.Time
	lockDone := make(chan struct{})
	errs, ends, released := w.handleGrouped(t, ctx, f, func(held []uuid.UUID) {
		// Lock a task whose record step is queued, not held.
		for i, tr := range w.trs {
			if !slices.Contains(held, tr.ID) {
				locked = i
				break
			}
		}
		tx, err := w.l.env.DB.Owner.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT 1 FROM material_transfers WHERE id = $1 FOR UPDATE`, w.trs[locked].ID)
		require.NoError(t, err)
		go func() {
			defer close(lockDone)
			time.Sleep(300*time.Millisecond + lockFor)
			unlocked = time.Now()
			_ = tx.Rollback(context.Background())
		}()
	})
	testwait.Recv(t, lockDone, "the other session's lock released")
	// The lock time-out (500ms) plus one group's time, with room for a loaded machine.
	const bound = 500*time.Millisecond + 1500*time.Millisecond
	for i, err := range errs {
		require.NoError(t, err, "job %d", i)
		if i == locked {
			require.True(t, ends[i].After(unlocked), "the locked job ended %s after the lock was let go", ends[i].Sub(unlocked))
			continue
		}
		require.Less(t, ends[i].Sub(released), bound, "job %d", i)
		require.Equal(t, domain.TaskSucceeded, w.load(t, i).Status)
	}
	require.Equal(t, domain.TaskSucceeded, w.load(t, locked).Status)
	var last time.Duration
	for i, end := range ends {
		if i != locked {
			last = max(last, end.Sub(released))
		}
	}
	t.Logf("the others ended within %s of their release; the locked one %s after its lock", last, ends[locked].Sub(unlocked))
}

// A begin step answered busy (Begin's error with a Retry-After) writes nothing and leaves
// its group intact: the other begin steps of the group commit with it, each Begin run
// once (not again alone), and the busy job is snoozed.
func TestGroupedBusyBeginLeavesTheGroupIntact(t *testing.T) {
	w := newGroupWorld(t, 16)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	busy := w.trs[len(w.trs)-1].ID
	var holding atomic.Int64
	hold := make(chan struct{})
	var mu sync.Mutex
	begins := map[uuid.UUID]int{}
	f := w.l.flow(t, func() (string, error) { return "done", nil }, func(*domain.MaterialTransfer) error { return nil })
	f.Call = func(context.Context, domain.MaterialTransfer, struct{}, worker.Tx) (string, error) {
		return "done", nil
	}
	f.Begin = func(_ context.Context, tr *domain.MaterialTransfer) (struct{}, error) {
		mu.Lock()
		begins[tr.ID]++
		mu.Unlock()
		if tr.ID == busy {
			return struct{}{}, domain.ErrListingUpdateBusy.WithRetryAfter(time.Second)
		}
		if holding.Add(1) <= groupLeaders {
			select {
			case <-hold:
			case <-ctx.Done():
				return struct{}{}, ctx.Err()
			}
		}
		return struct{}{}, nil
	}
	errs := make([]error, len(w.jobs))
	var wg sync.WaitGroup
	for i, job := range w.jobs {
		wg.Go(func() { errs[i] = f.Handle(jobContext(ctx, job), job) })
	}
	require.Eventually(t, func() bool { return holding.Load() >= groupLeaders }, 30*time.Second, time.Millisecond)
	time.Sleep(300 * time.Millisecond) // let the other begin steps queue
	close(hold)
	wg.Wait()
	for i, err := range errs {
		if w.trs[i].ID == busy {
			_, snoozed := worker.SnoozeOf(err)
			require.True(t, snoozed, "job %d: %v", i, err)
			require.Equal(t, domain.TaskPending, w.load(t, i).Status)
			continue
		}
		require.NoError(t, err, "job %d", i)
		require.Equal(t, domain.TaskSucceeded, w.load(t, i).Status)
	}
	for i, tr := range w.trs {
		require.Equal(t, 1, begins[tr.ID], "Begin runs of job %d", i)
	}
}

// The record step gives up within RecordRetryBudget when the database stalls it (its task
// row locked by another session for longer): the job is retried (its result held is the
// liveness rules' concern), and the step does not outlive the stop bound built on it.
func TestRecordGivesUpWithinItsBudget(t *testing.T) {
	l := newLifecycle(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, job := l.task(t)
	lock, err := l.env.DB.Owner.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback(context.Background()) })
	var called time.Time
	f := l.flow(t, func() (string, error) { return "done", nil }, nil)
	f.Call = func(ctx context.Context, _ domain.MaterialTransfer, _ struct{}, _ worker.Tx) (string, error) {
		// The database stalls the record step: its task row is held elsewhere.
		_, err := lock.Exec(ctx, `SELECT 1 FROM material_transfers WHERE id = $1 FOR UPDATE`, tr.ID)
		called = time.Now()
		return "done", err
	}
	err = f.Handle(ctx, job)
	took := time.Since(called)
	require.Error(t, err)
	require.False(t, worker.IsPermanent(err))
	require.Less(t, took, worker.RecordRetryBudget)
	t.Logf("the record step gave up after %s (budget %s): %v", took, worker.RecordRetryBudget, err)
	require.NoError(t, lock.Rollback(ctx))
	got, _ := l.state(t, tr)
	require.Equal(t, domain.TaskRunning, got.Status)
}
