package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/internal/workertest"
)

// The lifecycle's error policy, on a flow whose call does what each case says, over the
// material transfer table (a task with no foreign keys).
type lifecycle struct {
	env   *workertest.Env
	tasks *postgres.Repository[domain.MaterialTransfer]
	calls int
}

func newLifecycle(t *testing.T) *lifecycle {
	return &lifecycle{env: workertest.New(t), tasks: postgres.NewMaterialTransfers()}
}

func (l *lifecycle) flow(t *testing.T, call func() (string, error), begin func(*domain.MaterialTransfer) error) worker.Flow[domain.MaterialTransfer, struct{}, string] {
	kind := worker.Kind[domain.MaterialTransfer]{QueueName: "q", Deps: l.env.Deps, Tasks: l.tasks,
		TaskOf: func(t *domain.MaterialTransfer) *domain.Task { return &t.Task },
		TaskID: worker.PayloadID(func(e domain.MaterialTransferRequested) uuid.UUID { return e.TransferID })}
	f := worker.Flow[domain.MaterialTransfer, struct{}, string]{Kind: kind,
		Call: func(context.Context, domain.MaterialTransfer, struct{}, worker.Tx) (string, error) {
			l.calls++
			return call()
		},
		Record: func(_ context.Context, t *domain.MaterialTransfer, r string) (any, error) {
			t.SourceURL = "https://example.com/" + r
			return map[string]string{"r": r}, nil
		}}
	if begin != nil {
		f.Begin = func(_ context.Context, t *domain.MaterialTransfer) (struct{}, error) { return struct{}{}, begin(t) }
	}
	require.NoError(t, f.Validate())
	return f
}

// task inserts a pending transfer and its operation; it returns the task and the job of its
// request event.
func (l *lifecycle) task(t *testing.T) (domain.MaterialTransfer, worker.Job) {
	t.Helper()
	e := l.env
	op := domain.NewOperation(e.Workspace, e.User, "material_transfer", "material_transfer", uuid.New(), time.Now())
	tr := domain.MaterialTransfer{Task: domain.NewTask(op.ResourceID, e.Workspace, op.ID, time.Now()),
		SourceURL: "https://example.com/a", MediaID: uuid.New()}
	workertest.InsertTask(t, e, l.tasks, op, tr)
	return tr, e.Job(t, tr.RequestEvent(), 1, false)
}

func (l *lifecycle) state(t *testing.T, tr domain.MaterialTransfer) (domain.MaterialTransfer, domain.Operation) {
	return workertest.Load(t, l.env, l.tasks, tr.ID), l.env.Operation(t, tr.OperationID)
}

func TestLifecycleSucceedsOnceAndSkipsAfter(t *testing.T) {
	l := newLifecycle(t)
	f := l.flow(t, func() (string, error) { return "done", nil }, nil)
	tr, job := l.task(t)
	require.NoError(t, f.Handle(context.Background(), job))
	got, op := l.state(t, tr)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, "https://example.com/done", got.SourceURL)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	require.JSONEq(t, `{"r":"done"}`, string(op.Result))
	require.Equal(t, []string{"succeeded"}, l.env.StatusEvents(t, tr.OperationID))

	require.NoError(t, f.Handle(context.Background(), job), "a redelivery of a finished task succeeds")
	require.Equal(t, 1, l.calls, "and calls nothing")
	require.Contains(t, l.env.Logs.String(), `"outcome":"skipped"`)
}

func TestLifecycleRetriesThenRecordsTheLastAttempt(t *testing.T) {
	l := newLifecycle(t)
	f := l.flow(t, func() (string, error) { return "", port.ErrPlatformTransient }, nil)
	tr, job := l.task(t)
	err := f.Handle(context.Background(), job)
	require.Error(t, err)
	require.False(t, worker.IsPermanent(err), "retried")
	got, _ := l.state(t, tr)
	require.Equal(t, domain.TaskRunning, got.Status)
	require.Contains(t, l.env.Logs.String(), `"outcome":"retry","duration":`, "the attempt's line says a retry follows")
	require.Contains(t, l.env.Logs.String(), `"retry":true`)
	require.NotContains(t, l.env.Logs.String(), `"retry":false`)

	job.Attempt, job.LastAttempt = 2, true
	err = f.Handle(context.Background(), job)
	require.True(t, worker.IsPermanent(err))
	got, op := l.state(t, tr)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, port.ErrPlatformTransient.Code, got.ErrorCode)
	require.Equal(t, domain.OperationFailed, op.Status)
	require.Equal(t, 2, got.Attempts)
	require.Contains(t, l.env.Logs.String(), `"retry":false`, "the last attempt's line says none follows")
}

// A job's start publishes no status event (the operation is running all the same); its
// finish carries started_at, the start's time, and a version that counts the start.
func TestLifecycleFinishCarriesItsStart(t *testing.T) {
	for _, fails := range []bool{false, true} {
		t.Run(map[bool]string{false: "succeeded", true: "failed"}[fails], func(t *testing.T) {
			l := newLifecycle(t)
			var mu sync.Mutex
			start := time.Date(2026, 12, 3, 10, 0, 0, 123456000, time.UTC)
			now := start
			l.env.Deps.Now = func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				return now
			}
			var tr domain.MaterialTransfer
			f := l.flow(t, func() (string, error) {
				_, op := l.state(t, tr)
				require.Equal(t, domain.OperationRunning, op.Status, "GET of the operation shows it running")
				require.Empty(t, l.env.StatusEvents(t, tr.OperationID), "no running event")
				mu.Lock()
				now = now.Add(90 * time.Second)
				mu.Unlock()
				if fails {
					return "", port.ErrPlatformRejected
				}
				return "done", nil
			}, nil)
			var job worker.Job
			tr, job = l.task(t)
			err := f.Handle(context.Background(), job)
			want := domain.OperationSucceeded
			if fails {
				require.True(t, worker.IsPermanent(err))
				want = domain.OperationFailed
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, []string{string(want)}, l.env.StatusEvents(t, tr.OperationID))
			var ev domain.OperationStatusChanged
			require.NoError(t, l.env.DB.Owner.QueryRow(context.Background(), `SELECT event_payload FROM outbox_all_events
				WHERE event_type = 'operation.status_changed' AND aggregate_id = $1`, tr.OperationID.String()).Scan(&ev))
			require.Equal(t, want, ev.Status)
			require.Equal(t, 3, ev.Version, "pending, running, finished")
			require.NotNil(t, ev.StartedAt, "the finish carries started_at")
			require.True(t, start.Equal(*ev.StartedAt), "started_at %s, want the start %s", ev.StartedAt, start)
			_, op := l.state(t, tr)
			require.True(t, start.Add(90*time.Second).Equal(op.UpdatedAt), "the operation's update is its finish")
		})
	}
}

func TestLifecyclePermanentErrorFailsAtOnce(t *testing.T) {
	l := newLifecycle(t)
	f := l.flow(t, func() (string, error) { return "", port.ErrPlatformRejected }, nil)
	tr, job := l.task(t)
	require.True(t, worker.IsPermanent(f.Handle(context.Background(), job)))
	got, _ := l.state(t, tr)
	require.Equal(t, port.ErrPlatformRejected.Code, got.ErrorCode)
}

func TestLifecycleRefusalFailsWithoutACall(t *testing.T) {
	l := newLifecycle(t)
	f := l.flow(t, func() (string, error) { return "x", nil }, func(*domain.MaterialTransfer) error {
		return worker.Refuse(domain.ErrStoreNotVerified)
	})
	tr, job := l.task(t)
	require.True(t, worker.IsPermanent(f.Handle(context.Background(), job)))
	require.Zero(t, l.calls)
	got, op := l.state(t, tr)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "STORE_NOT_VERIFIED", got.ErrorCode)
	require.Zero(t, got.Attempts, "never started")
	require.Equal(t, "STORE_NOT_VERIFIED", op.ErrorCode)
	require.Equal(t, []string{"failed"}, l.env.StatusEvents(t, tr.OperationID))
}

func TestLifecycleSnoozesWithinItsBounds(t *testing.T) {
	l := newLifecycle(t)
	limited := port.ErrPlatformRateLimited.WithRetryAfter(20 * time.Second)
	f := l.flow(t, func() (string, error) { return "", limited }, nil)
	tr, job := l.task(t)

	err := f.Handle(context.Background(), job)
	delay, ok := worker.SnoozeOf(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, 20*time.Second, delay)

	// Past MaxSnoozes, or MaxSnooze in total, the wait spends an attempt like any retry.
	job.Snoozes = worker.MaxSnoozes
	err = f.Handle(context.Background(), job)
	_, ok = worker.SnoozeOf(err)
	require.False(t, ok)
	require.False(t, worker.IsPermanent(err))
	job.Snoozes, job.Snoozed = 1, worker.MaxSnooze
	_, ok = worker.SnoozeOf(f.Handle(context.Background(), job))
	require.False(t, ok)

	// Even a snooze never keeps a task whose last attempt failed from failing.
	job.Snoozes, job.Snoozed, job.LastAttempt = 0, 0, true
	_, ok = worker.SnoozeOf(f.Handle(context.Background(), job))
	require.True(t, ok, "a snooze spends no attempt, so it is not the last one yet")
	got, _ := l.state(t, tr)
	require.Equal(t, domain.TaskRunning, got.Status)
}

func TestLifecycleTaskGoneFailsTheOperationItsEventNames(t *testing.T) {
	l := newLifecycle(t)
	f := l.flow(t, func() (string, error) { return "x", nil }, nil)
	e := l.env
	op := domain.NewOperation(e.Workspace, e.User, "material_transfer", "material_transfer", uuid.New(), time.Now())
	e.InTx(t, func(ctx context.Context) error { return e.Deps.Operations.Insert(ctx, op) })
	job := e.Job(t, domain.MaterialTransferRequested{TransferID: uuid.New(), OperationID: op.ID}, 1, false)

	require.True(t, worker.IsPermanent(f.Handle(context.Background(), job)))
	got := e.Operation(t, op.ID)
	require.Equal(t, domain.OperationFailed, got.Status)
	require.Equal(t, "TRANSFER_NOT_FOUND", got.ErrorCode)
}

func TestLifecycleFailureNotRecordedIsRetried(t *testing.T) {
	l := newLifecycle(t)
	f := l.flow(t, func() (string, error) { return "", port.ErrPlatformRejected }, nil)
	tr, job := l.task(t)
	d := f.Deps
	calls := 0
	// The begin transaction commits; every later one fails (the database went away).
	d.Tx = txFunc(func(ctx context.Context, ws, user uuid.UUID, fn func(ctx context.Context) error) error {
		if calls++; calls > 1 {
			return errors.New("connection refused")
		}
		return l.env.Deps.Tx.InTx(ctx, ws, user, fn)
	})
	f.Deps, f.Kind.Deps = d, d
	err := f.Handle(context.Background(), job)
	require.False(t, worker.IsPermanent(err), "not recorded: delivered again to record it (%v)", err)
	got, _ := l.state(t, tr)
	require.Equal(t, domain.TaskRunning, got.Status)
}

type txFunc func(ctx context.Context, ws, user uuid.UUID, fn func(ctx context.Context) error) error

func (f txFunc) InTx(ctx context.Context, ws, user uuid.UUID, fn func(ctx context.Context) error) error {
	return f(ctx, ws, user, fn)
}

// A record transaction that fails after a successful call is tried again with the result
// held: one call, and the task succeeds in the same delivery.
func TestLifecycleRecordFailureRetriesTheRecordNotTheCall(t *testing.T) {
	l := newLifecycle(t)
	f := l.flow(t, func() (string, error) { return "done", nil }, nil)
	tr, job := l.task(t)
	d := f.Deps
	d.Tx = &workertest.FlakyTx{Transactor: l.env.Deps.Tx, FailAt: 2, Times: 2} // the record step, twice
	f.Deps, f.Kind.Deps = d, d
	require.NoError(t, f.Handle(context.Background(), job))
	require.Equal(t, 1, l.calls, "the call is not made again")
	got, op := l.state(t, tr)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, domain.OperationSucceeded, op.Status)
}

// The record step's retries are bounded: a record that keeps failing gives the job up to
// the transport (retried), without recording a failure over a call that succeeded.
func TestLifecycleRecordRetriesAreBounded(t *testing.T) {
	l := newLifecycle(t)
	f := l.flow(t, func() (string, error) { return "done", nil }, nil)
	tr, job := l.task(t)
	d := f.Deps
	d.Tx = &workertest.FlakyTx{Transactor: l.env.Deps.Tx, FailAt: 2, Times: workertest.CrashTimes}
	f.Deps, f.Kind.Deps = d, d
	start := time.Now()
	err := f.Handle(context.Background(), job)
	require.ErrorIs(t, err, workertest.ErrCrash)
	require.False(t, worker.IsPermanent(err))
	require.Less(t, time.Since(start), worker.RecordRetryBudget)
	got, _ := l.state(t, tr)
	require.Equal(t, domain.TaskRunning, got.Status)
}

// A delivery whose context is gone (its lock lost, or cut short by shutdown) records
// nothing, not even on its last attempt: the job is no longer this worker's.
func TestLifecycleCancelledDeliveryRecordsNothing(t *testing.T) {
	l := newLifecycle(t)
	ctx, cancel := context.WithCancel(context.Background())
	f := l.flow(t, func() (string, error) {
		cancel() // the lock is lost while the call runs
		return "done", nil
	}, nil)
	tr, job := l.task(t)
	job.LastAttempt = true
	err := f.Handle(ctx, job)
	require.Error(t, err)
	require.False(t, worker.IsPermanent(err))
	got, op := l.state(t, tr)
	require.Equal(t, domain.TaskRunning, got.Status, "neither succeeded nor failed by this worker")
	require.Equal(t, domain.OperationRunning, op.Status)
}

// Jobs handled at the same time commit their steps together (group commit) and each still
// succeeds once: two deliveries of every task run concurrently, every one returns nil, and
// each operation publishes its finish once, with its start (StatusEvents checks started_at).
func TestLifecycleConcurrentJobsEachSucceedOnce(t *testing.T) {
	l := newLifecycle(t)
	var calls atomic.Int64
	f := l.flow(t, func() (string, error) { return "done", nil }, nil)
	f.Call = func(context.Context, domain.MaterialTransfer, struct{}, worker.Tx) (string, error) {
		calls.Add(1)
		return "done", nil
	}
	const n = 40
	trs := make([]domain.MaterialTransfer, n)
	jobs := make([]worker.Job, n)
	for i := range n {
		trs[i], jobs[i] = l.task(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i := range 2 * n {
		wg.Go(func() { errs[i] = f.Handle(ctx, jobs[i%n]) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "delivery %d", i)
	}
	for _, tr := range trs {
		got, op := l.state(t, tr)
		require.Equal(t, domain.TaskSucceeded, got.Status)
		require.Equal(t, domain.OperationSucceeded, op.Status)
		require.Equal(t, []string{"succeeded"}, l.env.StatusEvents(t, tr.OperationID))
	}
	require.GreaterOrEqual(t, calls.Load(), int64(n))
}

// A record step that gives up after a successful call holds the call's result on the task
// (Flow.Hold), in the database: the next delivery records it without calling again, and a
// give-up on the last attempt records no failure over the successful call: the job is snoozed
// (HeldRetry) while it has snoozes left, else it ends and the reconciler's delivery records
// it. Without Hold, the next delivery calls again.
func TestLifecycleHeldResultIsRecordedNotCalledAgain(t *testing.T) {
	for _, c := range []struct {
		name  string
		hold  bool
		last  bool
		spent bool // the job's snoozes are spent
		calls int
	}{
		{name: "held_then_retried", hold: true, calls: 1},
		{name: "held_on_the_last_attempt", hold: true, last: true, calls: 1},
		{name: "held_on_the_last_attempt_snoozes_spent", hold: true, last: true, spent: true, calls: 1},
		{name: "not_held", calls: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLifecycle(t)
			f := l.flow(t, func() (string, error) { return "done", nil }, nil)
			if c.hold {
				f.Hold = func(r string) ([]byte, error) { return []byte(`"` + r + `"`), nil }
				f.Unhold = func(b []byte) (string, error) { return string(b[1 : len(b)-1]), nil }
			}
			tr, job := l.task(t)
			d := f.Deps
			d.Tx = &workertest.FlakyTx{Transactor: l.env.Deps.Tx, FailAt: 2, Times: workertest.CrashTimes}
			f.Deps, f.Kind.Deps = d, d
			job.LastAttempt = c.last
			if c.spent {
				job.Snoozes = worker.MaxSnoozes
			}
			err := f.Handle(context.Background(), job)
			require.ErrorIs(t, err, workertest.ErrCrash)
			delay, snoozed := worker.SnoozeOf(err)
			require.Equal(t, c.last && !c.spent, snoozed, "a held result on the last attempt snoozes the job")
			if snoozed {
				require.Equal(t, worker.HeldRetry, delay)
				require.False(t, worker.IsWait(err), "a snooze counted")
			}
			require.Equal(t, c.last && c.spent, worker.IsPermanent(err))
			got, _ := l.state(t, tr)
			require.Equal(t, domain.TaskRunning, got.Status, "no failure recorded over a successful call")
			if c.hold {
				require.JSONEq(t, `"done"`, string(got.HeldResult))
				require.Contains(t, l.env.Logs.String(), `"outcome":"held"`)
			}

			// The next delivery (the transport's retry, or the reconciler's under a new job).
			f.Deps, f.Kind.Deps = l.env.Deps, l.env.Deps
			job.Attempt, job.LastAttempt = job.Attempt+1, false
			require.NoError(t, f.Handle(context.Background(), job))
			require.Equal(t, c.calls, l.calls, "external calls")
			got, op := l.state(t, tr)
			require.Equal(t, domain.TaskSucceeded, got.Status)
			require.Equal(t, "https://example.com/done", got.SourceURL)
			require.Nil(t, got.HeldResult)
			require.Equal(t, domain.OperationSucceeded, op.Status)
		})
	}
}

// fullBuckets is a RateBuckets over which every take waits wait; it counts the lowerings.
type fullBuckets struct {
	wait    time.Duration
	lowered int
}

func (b *fullBuckets) Take(context.Context, string, domain.RateLimit, int) (time.Duration, error) {
	return b.wait, nil
}

func (b *fullBuckets) Lower(context.Context, string, domain.RateLimit, time.Duration) error {
	b.lowered++
	return nil
}

// TestLifecycleStoreBudgetWaitSpendsNothing: a job whose store is over budget (its Begin's
// StoreBudget.Wait) waits, even past MaxSnoozes and on its last attempt: no call, no write,
// the task still pending with no attempt, the wait not counted as a snooze (SnoozeError.Wait).
func TestLifecycleStoreBudgetWaitSpendsNothing(t *testing.T) {
	l := newLifecycle(t)
	buckets := &fullBuckets{wait: 300 * time.Millisecond}
	waited := 0
	budget := &worker.StoreBudget{Buckets: buckets, Platforms: map[string]domain.RateLimit{"sandbox": {PerSecond: 10, Burst: 20}},
		Waited: func(context.Context, string) { waited++ }}
	store := domain.Store{ID: uuid.New(), Platform: "sandbox"}
	f := l.flow(t, func() (string, error) { return "x", nil }, func(*domain.MaterialTransfer) error {
		return budget.Wait(context.Background(), store, 2)
	})
	tr, job := l.task(t)
	job.Snoozes, job.LastAttempt = worker.MaxSnoozes, true
	err := f.Handle(context.Background(), job)
	delay, ok := worker.SnoozeOf(err)
	require.True(t, ok, "%v", err)
	require.True(t, worker.IsWait(err))
	require.Equal(t, 300*time.Millisecond, delay)
	require.Zero(t, l.calls)
	require.Equal(t, 1, waited)
	got, op := l.state(t, tr)
	require.Equal(t, domain.TaskPending, got.Status)
	require.Zero(t, got.Attempts)
	require.Equal(t, domain.OperationPending, op.Status)

	// A store's own limit replaces its platform's; a store of a platform without one waits
	// for nothing; a 429 lowers the budget.
	require.Equal(t, domain.RateLimit{PerSecond: 1, Burst: 1}, budget.Limit(domain.Store{Platform: "sandbox", RateLimit: domain.RateLimit{PerSecond: 1, Burst: 1}}))
	require.NoError(t, budget.Wait(context.Background(), domain.Store{Platform: "other"}, 1))
	budget.Limited(context.Background(), store, fmt.Errorf("call: %w", port.ErrPlatformRateLimited.WithRetryAfter(time.Second)))
	budget.Limited(context.Background(), store, errors.New("boom"))
	require.Equal(t, 1, buckets.lowered)
}

// The call fence: a run records its call's deadline on the task and calls under it; a
// delivery that finds the task running before that deadline (the previous worker died with
// its call in flight) waits for it without calling or spending an attempt, and one after it
// runs. A call that ends with an error lifts its fence: the retry does not wait.
func TestLifecycleFencedCallWaitsForItsDeadline(t *testing.T) {
	l := newLifecycle(t)
	var mu sync.Mutex
	now := time.Date(2026, 12, 6, 10, 0, 0, 123456789, time.UTC)
	clock := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	l.env.Deps.Now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	start := now
	var deadlines []time.Time
	var answer func(ctx context.Context) (string, error)
	f := l.flow(t, nil, nil)
	f.CallTimeout = 30 * time.Second
	f.Call = func(ctx context.Context, _ domain.MaterialTransfer, _ struct{}, _ worker.Tx) (string, error) {
		l.calls++
		d, ok := ctx.Deadline()
		require.True(t, ok, "the call runs under its fence")
		deadlines = append(deadlines, d)
		return answer(ctx)
	}
	tr, job := l.task(t)

	// The first worker's job ends while its call is in flight (its lock lost, or the worker
	// stopped): the fence stays.
	jctx, cancel := context.WithCancel(context.Background())
	answer = func(context.Context) (string, error) {
		cancel()
		return "", context.Canceled
	}
	require.Error(t, f.Handle(jctx, job))
	require.Equal(t, []time.Time{start.Add(30 * time.Second).Truncate(time.Microsecond)}, deadlines)
	got, _ := l.state(t, tr)
	require.Equal(t, domain.TaskRunning, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.True(t, got.CallDeadline.Equal(deadlines[0]), "the deadline is on the task: %s", got.CallDeadline)

	// Another worker meets the task 10s later: it waits for the rest of the fence.
	clock(10 * time.Second)
	answer = func(context.Context) (string, error) { return "done", nil }
	err := f.Handle(context.Background(), job)
	delay, ok := worker.SnoozeOf(err)
	require.True(t, ok, "%v", err)
	require.True(t, worker.IsWait(err), "no attempt and no snooze spent")
	require.InDelta(t, float64(20*time.Second+worker.FenceMargin), float64(delay), float64(time.Millisecond))
	require.Equal(t, 1, l.calls, "no call beside the one that may still land")
	got, _ = l.state(t, tr)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, domain.TaskRunning, got.Status)

	// Past the deadline, the delivery runs.
	clock(21 * time.Second)
	require.NoError(t, f.Handle(context.Background(), job))
	require.Equal(t, 2, l.calls)
	got, op := l.state(t, tr)
	require.Equal(t, domain.TaskSucceeded, got.Status)
	require.Equal(t, domain.OperationSucceeded, op.Status)
	require.Equal(t, 2, got.Attempts)

	// A call that fails lifts its fence: the retry calls at once.
	tr2, job2 := l.task(t)
	answer = func(context.Context) (string, error) { return "", port.ErrPlatformTransient }
	err = f.Handle(context.Background(), job2)
	require.Error(t, err)
	_, snoozed := worker.SnoozeOf(err)
	require.False(t, snoozed)
	got, _ = l.state(t, tr2)
	require.True(t, got.CallDeadline.IsZero(), "fence lifted: %s", got.CallDeadline)
	answer = func(context.Context) (string, error) { return "again", nil }
	require.NoError(t, f.Handle(context.Background(), job2))
	require.Equal(t, 4, l.calls)
	got, _ = l.state(t, tr2)
	require.Equal(t, domain.TaskSucceeded, got.Status)
}
