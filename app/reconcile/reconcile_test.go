package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/reconcile"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/app/worker/mediaproc"
	"github.com/listingkit/listing/app/worker/transfer"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/internal/testwait"
	"github.com/listingkit/listing/internal/workertest"
)

type bundle struct {
	env       *workertest.Env
	transfers *postgres.Repository[domain.MaterialTransfer]
	tasks     *postgres.Repository[domain.MediaTask]
	media     *postgres.Repository[domain.Media]
	reg       *prometheus.Registry
	r         *reconcile.Reconciler
}

func setup(t *testing.T, max int) *bundle {
	return setupWith(t, max, nil)
}

func setupWith(t *testing.T, max int, probe port.JobProbe) *bundle {
	return setupAged(t, max, 0, probe)
}

// setupAged is setupWith with a MaxAge (0: the default).
func setupAged(t *testing.T, max int, maxAge time.Duration, probe port.JobProbe) *bundle {
	t.Helper()
	e := workertest.New(t)
	b := &bundle{env: e, transfers: postgres.NewMaterialTransfers(), tasks: postgres.NewMediaTasks(),
		media: postgres.NewMedia(), reg: prometheus.NewRegistry()}
	r, err := reconcile.New(reconcile.Config{
		Kinds: []worker.TaskKind{transfer.Tasks(e.Deps, b.transfers), mediaproc.Tasks(e.Deps, b.tasks, b.media)},
		Stuck: postgres.StuckTasks{Pool: e.DB.App, Tables: flows.TaskTables()}, Tx: e.Deps.Tx, Probe: probe, DefaultAfter: time.Minute,
		MaxReconciliations: max, MaxAge: maxAge, Log: e.Log, Registerer: b.reg,
	})
	require.NoError(t, err)
	b.r = r
	return b
}

// transferTask inserts a pending transfer and its operation, as the command does but
// without its outbox event: the event was dispatched and its job lost since.
func (b *bundle) transferTask(t *testing.T) domain.MaterialTransfer {
	t.Helper()
	e := b.env
	op := domain.NewOperation(e.Workspace, e.User, "material_transfer", "material_transfer", uuid.New(), time.Now())
	tr := domain.MaterialTransfer{Task: domain.NewTask(op.ResourceID, e.Workspace, op.ID, time.Now()),
		SourceURL: "https://example.com/a.jpg", MediaID: uuid.New()}
	workertest.InsertTask(t, e, b.transfers, op, tr)
	return tr
}

// age makes the task look unmoved for an hour.
func (b *bundle) age(t *testing.T, table string, id uuid.UUID) {
	t.Helper()
	_, err := b.env.DB.Owner.Exec(context.Background(),
		"UPDATE "+pgx.Identifier{table}.Sanitize()+" SET updated_at = now() - interval '1 hour' WHERE id = $1", id)
	require.NoError(t, err)
}

// ran counts one start of the task's handler, as Task.Start does.
func (b *bundle) ran(t *testing.T, table string, id uuid.UUID) {
	t.Helper()
	_, err := b.env.DB.Owner.Exec(context.Background(),
		"UPDATE "+pgx.Identifier{table}.Sanitize()+" SET attempts = attempts + 1, status = 'running' WHERE id = $1", id)
	require.NoError(t, err)
}

// delivered counts the tasks a sweep delivered again, whether they ran or not.
func delivered(r reconcile.Result) int { return r.Redelivered + r.Unrun }

// requests returns the ids of the outbox's material_transfer.requested events for id.
func (b *bundle) requests(t *testing.T, id uuid.UUID) []uuid.UUID {
	t.Helper()
	rows, err := b.env.DB.Owner.Query(context.Background(), `SELECT id FROM outbox_all_events
		WHERE event_type = 'material_transfer.requested' AND event_payload->>'transfer_id' = $1 ORDER BY created_at`, id.String())
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

func (b *bundle) dispatchAll(t *testing.T) {
	t.Helper()
	_, err := b.env.DB.Owner.Exec(context.Background(),
		`WITH m AS (DELETE FROM outbox_events WHERE status = 'pending' RETURNING *)
		INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
		                               event_payload, metadata, attempt_count, created_at, dispatched_at)
		SELECT id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload, metadata,
		       attempt_count, created_at, now() FROM m`)
	require.NoError(t, err)
}

func (b *bundle) sweep(t *testing.T) reconcile.Result {
	t.Helper()
	res, err := b.r.RunOnce(context.Background())
	require.NoError(t, err)
	require.True(t, res.Ran)
	require.Zero(t, res.Failed)
	return res
}

func TestStuckTaskIsDeliveredAgainThenExhausted(t *testing.T) {
	b := setup(t, 2)
	tr := b.transferTask(t)

	// Fresh: not stuck.
	require.Zero(t, b.sweep(t).Redelivered)
	require.Empty(t, b.requests(t, tr.ID))

	var seen []uuid.UUID
	for n := 1; n <= 2; n++ {
		b.ran(t, "material_transfers", tr.ID)
		b.age(t, "material_transfers", tr.ID)
		res := b.sweep(t)
		require.Equal(t, 1, res.Redelivered, "sweep %d", n)
		ids := b.requests(t, tr.ID)
		require.Len(t, ids, n, "one new request event per redelivery")
		seen = append(seen, ids[n-1])
		got := workertest.Load(t, b.env, b.transfers, tr.ID)
		require.Equal(t, n, got.Reconciliations)
		require.Zero(t, got.Redeliveries)
		require.Equal(t, domain.TaskRunning, got.Status)

		// While the outbox owes the task its delivery, it is not stuck, however old.
		b.age(t, "material_transfers", tr.ID)
		require.Zero(t, delivered(b.sweep(t)))
		b.dispatchAll(t)
	}
	require.NotEqual(t, seen[0], seen[1], "every redelivery has a job id of its own")

	// Past MaxReconciliations: the task and its operation fail for good.
	b.ran(t, "material_transfers", tr.ID)
	b.age(t, "material_transfers", tr.ID)
	res := b.sweep(t)
	require.Equal(t, 1, res.Exhausted)
	require.Zero(t, res.Redelivered)
	got := workertest.Load(t, b.env, b.transfers, tr.ID)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "DELIVERY_EXHAUSTED", got.ErrorCode)
	op := b.env.Operation(t, tr.OperationID)
	require.Equal(t, domain.OperationFailed, op.Status)
	require.Equal(t, "DELIVERY_EXHAUSTED", op.ErrorCode)
	require.Equal(t, []string{"failed"}, b.env.StatusEvents(t, tr.OperationID))
	require.Len(t, b.requests(t, tr.ID), 2, "no delivery after the last")

	require.Equal(t, 2.0, counter(t, b.reg, "material-transfer", "redelivered"))
	require.Equal(t, 1.0, counter(t, b.reg, "material-transfer", "exhausted"))
	require.Contains(t, b.env.Logs.String(), `"outcome":"exhausted"`)

	// A finished task is never touched again.
	b.age(t, "material_transfers", tr.ID)
	res = b.sweep(t)
	require.Zero(t, delivered(res)+res.Exhausted)
}

// Only a run spends a try: a task whose job is lost again and again before any worker
// starts it (Redis losing its data while the task waits in a backlog) is delivered again far
// more often than MaxReconciliations, each time backing off, until it is MaxAge old from its
// first dispatch; then it fails DELIVERY_EXHAUSTED.
func TestUnrunTaskIsDeliveredAgainUntilMaxAge(t *testing.T) {
	b := setupAged(t, 1, 3*time.Hour, nil)
	tr := b.transferTask(t)
	for n := 1; n <= 5; n++ {
		b.age(t, "material_transfers", tr.ID)
		res := b.sweep(t)
		require.Equal(t, 1, res.Unrun, "sweep %d", n)
		require.Zero(t, res.Redelivered+res.Exhausted)
		require.Len(t, b.requests(t, tr.ID), n)
		b.dispatchAll(t)
	}
	got := workertest.Load(t, b.env, b.transfers, tr.ID)
	require.Equal(t, 5, got.Redeliveries)
	require.Zero(t, got.Reconciliations, "no try spent")
	require.Equal(t, domain.TaskPending, got.Status)
	require.Equal(t, 5.0, counter(t, b.reg, "material-transfer", "redelivered_unrun"))
	require.Contains(t, b.env.Logs.String(), `"outcome":"redelivered_unrun"`)

	// The n-th free delivery backs off: unmoved for After (1m) + Interval (1m) × (2^5 − 1),
	// not less.
	_, err := b.env.DB.Owner.Exec(context.Background(),
		`UPDATE material_transfers SET updated_at = now() - interval '31 minutes' WHERE id = $1`, tr.ID)
	require.NoError(t, err)
	require.Zero(t, delivered(b.sweep(t)), "backing off")
	_, err = b.env.DB.Owner.Exec(context.Background(),
		`UPDATE material_transfers SET updated_at = now() - interval '33 minutes' WHERE id = $1`, tr.ID)
	require.NoError(t, err)
	require.Equal(t, 1, b.sweep(t).Unrun, "backed off long enough")
	b.dispatchAll(t)

	// Its age counts from the first dispatch of its request event, kept on the task.
	got = workertest.Load(t, b.env, b.transfers, tr.ID)
	require.False(t, got.FirstDispatchedAt.IsZero())
	require.WithinDuration(t, time.Now(), got.FirstDispatchedAt, time.Minute)

	// MaxAge old, still never run: DELIVERY_EXHAUSTED.
	_, err = b.env.DB.Owner.Exec(context.Background(),
		`UPDATE material_transfers SET first_dispatched_at = now() - interval '3 hours', updated_at = now() - interval '3 hours' WHERE id = $1`, tr.ID)
	require.NoError(t, err)
	res := b.sweep(t)
	require.Equal(t, 1, res.Exhausted)
	got = workertest.Load(t, b.env, b.transfers, tr.ID)
	require.Equal(t, domain.TaskFailed, got.Status)
	require.Equal(t, "DELIVERY_EXHAUSTED", got.ErrorCode)
}

// A task that ran, then had its redelivery lost before it ran again, is delivered again
// for free: its try was spent by the run, not by the loss.
func TestLossAfterARunSpendsNoSecondTry(t *testing.T) {
	b := setup(t, 1)
	tr := b.transferTask(t)
	b.ran(t, "material_transfers", tr.ID)
	b.age(t, "material_transfers", tr.ID)
	require.Equal(t, 1, b.sweep(t).Redelivered)
	b.dispatchAll(t)
	for range 3 {
		b.age(t, "material_transfers", tr.ID)
		require.Equal(t, 1, b.sweep(t).Unrun, "lost before it ran again")
		b.dispatchAll(t)
	}
	b.ran(t, "material_transfers", tr.ID)
	b.age(t, "material_transfers", tr.ID)
	require.Equal(t, 1, b.sweep(t).Exhausted, "it ran again and stalled: past RECONCILE_MAX")
}

// probe answers Unfinished from a set of job ids; it records what it was asked.
type probe struct {
	unfinished map[string]bool
	asked      []string
}

func (p *probe) Unfinished(_ context.Context, _ string, ids []string) (map[string]bool, error) {
	p.asked = append(p.asked, ids...)
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = p.unfinished[id]
	}
	return out, nil
}

// A task whose last job is still queued (a backlog) is not stuck; once that job is gone,
// it is.
func TestQueuedTaskIsNotStuck(t *testing.T) {
	p := &probe{unfinished: map[string]bool{}}
	b := setupWith(t, 3, p)
	tr := b.transferTask(t)
	b.age(t, "material_transfers", tr.ID)
	require.Equal(t, 1, delivered(b.sweep(t)), "no delivered job: stuck")
	b.dispatchAll(t)
	job := b.requests(t, tr.ID)[0]
	p.unfinished[job.String()] = true

	b.age(t, "material_transfers", tr.ID)
	require.Zero(t, delivered(b.sweep(t)), "its job waits in the queue")
	require.Equal(t, []string{job.String()}, p.asked)

	p.unfinished[job.String()] = false
	require.Equal(t, 1, delivered(b.sweep(t)), "its job is gone")
}

func TestExhaustedMediaProcessingRejectsTheMedia(t *testing.T) {
	b := setup(t, 0)
	e := b.env
	m, err := domain.NewMedia(uuid.New(), e.Workspace, "a.png", "image/png", 10, 100, time.Now())
	require.NoError(t, err)
	m.Status = domain.MediaProcessing
	e.InTx(t, func(ctx context.Context) error { return b.media.Insert(ctx, m) })
	op := domain.NewOperation(e.Workspace, e.User, "media_processing", "media", m.ID, time.Now())
	task := domain.MediaTask{Task: domain.NewTask(uuid.New(), e.Workspace, op.ID, time.Now()), MediaID: m.ID}
	workertest.InsertTask(t, e, b.tasks, op, task)
	b.ran(t, "media_processings", task.ID)
	b.age(t, "media_processings", task.ID)

	require.Equal(t, 1, b.sweep(t).Exhausted)
	got := workertest.Load(t, e, b.media, m.ID)
	require.Equal(t, domain.MediaRejected, got.Status)
	require.Equal(t, "DELIVERY_EXHAUSTED", got.RejectReason)
}

func TestOneSweepAtATime(t *testing.T) {
	b := setup(t, 3)
	tr := b.transferTask(t)
	b.age(t, "material_transfers", tr.ID)

	hold, release := make(chan struct{}), make(chan struct{})
	type sweep struct {
		ran bool
		err error
	}
	held := make(chan sweep, 1)
	go func() {
		// The held sweep ends on release or at the end of the test (t.Context).
		ran, err := postgres.StuckTasks{Pool: b.env.DB.App}.Exclusive(t.Context(), "reconcile",
			func(ctx context.Context) error {
				close(hold)
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		held <- sweep{ran, err}
	}()
	testwait.Recv(t, hold, "the other sweep")
	res, err := b.r.RunOnce(context.Background())
	require.NoError(t, err)
	require.False(t, res.Ran, "another process holds the sweep")
	require.Empty(t, b.requests(t, tr.ID))
	close(release)
	other := testwait.Recv(t, held, "the other sweep's end")
	require.NoError(t, other.err)
	require.True(t, other.ran)

	require.Equal(t, 1, delivered(b.sweep(t)), "the lock went with the sweep that held it")
}

func TestFindIsScopedToTheWorkspace(t *testing.T) {
	b := setup(t, 3)
	tr := b.transferTask(t)
	b.age(t, "material_transfers", tr.ID)
	stuck := postgres.StuckTasks{Pool: b.env.DB.App, Tables: flows.TaskTables()}
	other := uuid.New()
	err := b.env.Deps.Tx.InTx(context.Background(), other, uuid.Nil, func(ctx context.Context) error {
		tasks, err := stuck.Find(ctx, worker.QueueMaterialTransfer, time.Now(), time.Second, 10)
		require.Empty(t, tasks)
		return err
	})
	require.NoError(t, err)
	wss, err := stuck.Workspaces(context.Background(), time.Now(), 10)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{b.env.Workspace}, wss)
}

// counter reads listing_reconciliations_total{queue,outcome} from reg.
func counter(t *testing.T, reg *prometheus.Registry, queue, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "listing_reconciliations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["queue"] == queue && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no listing_reconciliations_total{queue=%q,outcome=%q}", queue, outcome)
	return 0
}

// hookProbe is a probe that sees every job finished and runs during while it is asked.
type hookProbe struct{ during func() }

func (p *hookProbe) Unfinished(context.Context, string, []string) (map[string]bool, error) {
	if p.during != nil {
		p.during()
	}
	return map[string]bool{}, nil
}

// The reconciler holds no task row while it asks Redis about the tasks' jobs (another
// session locks the row at once, NOWAIT), and delivers again only a task that did not move
// meanwhile: one touched while it was probed is left to the next sweep.
func TestProbeRunsOutsideTheTaskRowLocks(t *testing.T) {
	p := &hookProbe{}
	b := setupWith(t, 3, p)
	tr := b.transferTask(t)
	b.age(t, "material_transfers", tr.ID)
	require.Equal(t, 1, delivered(b.sweep(t)), "no delivered job: stuck")
	b.dispatchAll(t)
	b.age(t, "material_transfers", tr.ID)

	probed := 0
	p.during = func() {
		probed++
		ctx := context.Background()
		tx, err := b.env.DB.Owner.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT 1 FROM material_transfers WHERE id = $1 FOR UPDATE NOWAIT`, tr.ID)
		require.NoError(t, err, "the task's row is held across the probe")
		_, err = tx.Exec(ctx, `UPDATE material_transfers SET updated_at = now() WHERE id = $1`, tr.ID)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	res := b.sweep(t)
	require.Equal(t, 1, probed)
	require.Zero(t, delivered(res)+res.Exhausted, "the task moved while it was probed")
	require.Len(t, b.requests(t, tr.ID), 1)

	p.during = nil
	b.age(t, "material_transfers", tr.ID)
	require.Equal(t, 1, delivered(b.sweep(t)), "stuck again: delivered again")
}
