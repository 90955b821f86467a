package outbox

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// fairTasks creates a task table for the tests (id, workspace_id, status; RLS per workspace,
// app_user's) with the fair-share trigger every task table has (sql/053).
func fairTasks(t *testing.T, db *pgtest.DB) {
	t.Helper()
	_, err := db.Owner.Exec(context.Background(), `
		CREATE TABLE fair_tasks (id uuid PRIMARY KEY, workspace_id uuid NOT NULL, status text NOT NULL DEFAULT 'pending');
		ALTER TABLE fair_tasks ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
		CREATE POLICY fair_tasks_tenant ON fair_tasks USING (workspace_id = app_workspace_id());
		GRANT ALL ON fair_tasks TO app_user;
		SELECT prepare_task_fair_share('fair_tasks');`)
	require.NoError(t, err)
}

// fairSetup is a database with fair_tasks and a BullMQ queue of the test's own.
func fairSetup(t *testing.T) (*pgtest.DB, *bullQueue) {
	t.Helper()
	db := pgtest.New(t)
	fairTasks(t, db)
	return db, newBullQueue(t, newRedis(t))
}

// requireDrained checks that the outbox owes nothing and no slot is taken.
// requireDrained waits (10 s at most) until the outbox and the slots are empty: a job may run
// before the dispatcher's mark moves its event to the log, and its slot goes with its task's
// end, both commits of their own after the worker saw the job.
func requireDrained(t *testing.T, db *pgtest.DB) {
	t.Helper()
	waitFor(t, 10*time.Second, "the outbox and the slots to empty", func() bool {
		return countSQL(t, db, `SELECT count(*) FROM outbox_events`) == 0 &&
			countSQL(t, db, `SELECT count(*) FROM outbox_fair_slots`) == 0
	})
}

func fairConfig(slots int) DispatcherConfig {
	c := fastConfig()
	c.FairShare = FairShare{Slots: slots, Queues: []FairQueue{{Flow: "fair", Queue: testQueue, TaskIDField: "thing_id", Table: "fair_tasks"}},
		LaneField: "store_id", SweepInterval: 200 * time.Millisecond}
	return c
}

// fairPublish commits n tasks of ws and their request events (thing_id = task id) in one
// transaction as app_user, and returns the task ids.
func fairPublish(t *testing.T, db *pgtest.DB, ws uuid.UUID, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	fairRepublish(t, db, ws, ids, true)
	return ids
}

// fairRepublish commits a request event for each task of ids (and the tasks, when create).
func fairRepublish(t *testing.T, db *pgtest.DB, ws uuid.UUID, ids []uuid.UUID, create bool) {
	t.Helper()
	fairRepublishIn(t, db, ws, "", ids, create)
}

// fairPublishIn is fairPublish with the requests in lane store.
func fairPublishIn(t *testing.T, db *pgtest.DB, ws uuid.UUID, store string, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	fairRepublishIn(t, db, ws, store, ids, true)
	return ids
}

// fairRepublishIn is fairRepublish with the requests in lane store ("": none named).
func fairRepublishIn(t *testing.T, db *pgtest.DB, ws uuid.UUID, store string, ids []uuid.UUID, create bool) {
	t.Helper()
	pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
	require.NoError(t, err)
	require.NoError(t, postgres.InTx(context.Background(), db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
		if create {
			if _, err := tx.Exec(ctx, `INSERT INTO fair_tasks (id, workspace_id) SELECT unnest($1::uuid[]), $2`, ids, ws); err != nil {
				return err
			}
		}
		for _, id := range ids {
			if err := pub.Publish(ctx, testHappened{ID: uuid.Must(uuid.NewV7()), ThingID: id.String(), Store: store}); err != nil {
				return err
			}
		}
		return nil
	}))
}

// fairWorker takes the jobs of a BullMQ queue, oldest first, as a worker would (RPOP of its
// wait list), and ends each one's task (succeeded, as app_user in its workspace) after work.
type fairWorker struct {
	t     *testing.T
	db    *pgtest.DB
	q     *bullQueue
	work  time.Duration
	mu    sync.Mutex
	runs  map[string]int       // task id -> jobs run
	start map[string]time.Time // task id -> first job start
	wsOf  map[string]uuid.UUID
	order []string
	// ended, when set, is called with the workspace after each task's end, as the service's
	// workers call EventPublisher.TaskEnded.
	ended func(uuid.UUID)
}

// startFairWorker runs a fairWorker until the test ends.
func startFairWorker(t *testing.T, db *pgtest.DB, q *bullQueue, work time.Duration) *fairWorker {
	return startFairWorkerEnding(t, db, q, work, nil)
}

// startFairWorkerEnding is startFairWorker calling ended after each task's end.
func startFairWorkerEnding(t *testing.T, db *pgtest.DB, q *bullQueue, work time.Duration, ended func(uuid.UUID)) *fairWorker {
	w := &fairWorker{t: t, db: db, q: q, work: work, runs: map[string]int{}, start: map[string]time.Time{}, wsOf: map[string]uuid.UUID{},
		ended: ended}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

// run works until ctx ends.
func (w *fairWorker) run(ctx context.Context) {
	wait := w.q.prefix + ":" + w.q.queue + ":wait"
	for ctx.Err() == nil {
		id, err := w.q.rdb.RPop(ctx, wait).Result()
		if err == redis.Nil {
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			continue
		}
		data, err := w.q.rdb.HGet(ctx, w.q.prefix+":"+w.q.queue+":"+id, "data").Result()
		if err != nil {
			w.t.Errorf("job %s: %v", id, err)
			continue
		}
		var env struct {
			WorkspaceID uuid.UUID       `json:"workspace_id"`
			Payload     json.RawMessage `json:"payload"`
		}
		var ev struct {
			ThingID string `json:"thing_id"`
		}
		if json.Unmarshal([]byte(data), &env) != nil || json.Unmarshal(env.Payload, &ev) != nil {
			w.t.Errorf("job %s: data %s", id, data)
			continue
		}
		w.mu.Lock()
		w.runs[ev.ThingID]++
		if _, ok := w.start[ev.ThingID]; !ok {
			w.start[ev.ThingID] = time.Now()
		}
		w.wsOf[ev.ThingID] = env.WorkspaceID
		w.order = append(w.order, ev.ThingID)
		w.mu.Unlock()
		time.Sleep(w.work)
		err = postgres.InTx(context.Background(), w.db.App, postgres.Scope{WorkspaceID: env.WorkspaceID}, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE fair_tasks SET status = 'succeeded' WHERE id = $1 AND status = 'pending'`, ev.ThingID)
			return err
		})
		if err != nil {
			w.t.Errorf("task %s: %v", ev.ThingID, err)
		}
		if w.ended != nil {
			w.ended(env.WorkspaceID)
		}
	}
}

func (w *fairWorker) started(id uuid.UUID) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.start[id.String()]
	return s, ok
}

func (w *fairWorker) ran(ws uuid.UUID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for task, k := range w.runs {
		if w.wsOf[task] == ws {
			n += k
		}
	}
	return n
}

func countSQL(t *testing.T, db *pgtest.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Owner.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// TestFairShareAdmitsAnotherWorkspaceBeforeTheBacklog: workspace N queues 300 tasks, then Q
// one; with 4 slots, N never has more than 4 jobs in Redis, and Q's job starts long before
// N's backlog drains, within a bounded time of its commit.
func TestFairShareAdmitsAnotherWorkspaceBeforeTheBacklog(t *testing.T) {
	db, q := fairSetup(t)
	n, other := createWorkspace(t, db), createWorkspace(t, db)
	backlog := fairPublish(t, db, n, 300)
	startDispatcher(t, db, fairConfig(4), q.router())
	w := startFairWorker(t, db, q, 3*time.Millisecond)

	waitFor(t, 20*time.Second, "N's first jobs", func() bool { return w.ran(n) >= 8 })
	require.Greater(t, countSQL(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'held' AND workspace_id = $1`, n), 200)
	require.LessOrEqual(t, countSQL(t, db, `SELECT count(*) FROM outbox_fair_slots WHERE workspace_id = $1`, n), 4)
	require.LessOrEqual(t, int(q.rdb.LLen(context.Background(), q.prefix+":"+q.queue+":wait").Val()), 4, "N's jobs in Redis")

	committed := time.Now()
	mine := fairPublish(t, db, other, 1)[0]
	waitFor(t, 10*time.Second, "Q's job", func() bool { _, ok := w.started(mine); return ok })
	began, _ := w.started(mine)
	t.Logf("Q's commit -> job start %s; N's jobs run by then %d of %d", began.Sub(committed), w.ran(n), len(backlog))
	require.Less(t, began.Sub(committed), 5*time.Second)
	require.Less(t, w.ran(n), len(backlog)-100, "Q waited for N's backlog")

	waitFor(t, 60*time.Second, "N's backlog drains", func() bool { return w.ran(n) == len(backlog) })
	requireDrained(t, db)
}

// TestFairShareRefillsAFreedSlotAtOnce: with 1 slot, K tasks of one lane go through it one
// after another. The dispatcher's discovery and sweep run once a second only; the worker
// tells the dispatcher of each task's end (EventPublisher.TaskEnded), so each freed slot is
// refilled at once: the K jobs drain in well under K seconds, where a refill that waits for
// the next discovery or sweep takes about a second a job.
func TestFairShareRefillsAFreedSlotAtOnce(t *testing.T) {
	db, q := fairSetup(t)
	ws := createWorkspace(t, db)
	const k = 20
	fairPublishIn(t, db, ws, "store-a", k)
	cfg := fairConfig(1)
	cfg.PollInterval, cfg.BusyPollInterval, cfg.FairShare.SweepInterval = time.Second, time.Second, time.Second
	pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
	require.NoError(t, err)
	startDispatcher(t, db, cfg, q.router())
	began := time.Now()
	w := startFairWorkerEnding(t, db, q, time.Millisecond, pub.TaskEnded(db.App))
	waitFor(t, 3*k*time.Second, "the lane's jobs", func() bool { return w.ran(ws) == k })
	took := time.Since(began)
	t.Logf("%d jobs through 1 slot in %s", k, took)
	require.Less(t, took, k*time.Second/4, "a freed slot waited for the next discovery or sweep")
	requireDrained(t, db)
}

// TestFairShareLanesHoldNothingOfEachOther: a workspace's slots are kept per lane (the
// store a request names). With no worker, store A's backlog fills A's slots and is held;
// store B's requests, committed after, take slots of their own at once (held only beyond
// them), and a task of A that ends gives its slot to A's next held request, never to B's.
// Then everything drains, each task once.
func TestFairShareLanesHoldNothingOfEachOther(t *testing.T) {
	db, q := fairSetup(t)
	ws := createWorkspace(t, db)
	a := fairPublishIn(t, db, ws, "store-a", 20)
	startDispatcher(t, db, fairConfig(4), q.router())
	var b []uuid.UUID
	lanes := map[string]*[]uuid.UUID{"store-a": &a, "store-b": &b}
	heldIn := func(lane string) int {
		return countSQL(t, db, `SELECT count(*) FROM outbox_events WHERE workspace_id = $1 AND status = 'held' AND held_task = ANY ($2)`, ws, *lanes[lane])
	}
	slotsOf := func(lane string) int {
		return countSQL(t, db, `SELECT count(*) FROM outbox_fair_slots WHERE workspace_id = $1 AND task_id = ANY ($2)`, ws, *lanes[lane])
	}
	waitFor(t, 20*time.Second, "store A's backlog held behind its 4 slots", func() bool { return heldIn("store-a") == 16 })

	b = fairPublishIn(t, db, ws, "store-b", 6)
	waitFor(t, 20*time.Second, "store B's requests admitted into slots of their own", func() bool {
		return slotsOf("store-b") == 4 && heldIn("store-b") == 2
	})
	require.Equal(t, 4, slotsOf("store-a"))
	require.Equal(t, 8, int(q.rdb.LLen(context.Background(), q.prefix+":"+q.queue+":wait").Val()), "4 jobs of each store in Redis")

	// One of A's admitted tasks ends: its slot goes to A's oldest held request.
	var done uuid.UUID
	require.NoError(t, db.Owner.QueryRow(context.Background(),
		`SELECT task_id FROM outbox_fair_slots WHERE workspace_id = $1 AND task_id = ANY ($2) ORDER BY slot LIMIT 1`, ws, a).Scan(&done))
	_, err := db.Owner.Exec(context.Background(), `UPDATE fair_tasks SET status = 'succeeded' WHERE id = $1`, done)
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "A's next request admitted", func() bool { return heldIn("store-a") == 15 && slotsOf("store-a") == 4 })
	require.Equal(t, 2, heldIn("store-b"), "B's held requests wait for B's slots")

	w := startFairWorker(t, db, q, time.Millisecond)
	waitFor(t, 60*time.Second, "both stores drain", func() bool {
		w.mu.Lock()
		ran := len(w.runs) // the task ended by hand included: its job was in Redis
		w.mu.Unlock()
		return ran == len(a)+len(b) && countSQL(t, db, `SELECT count(*) FROM fair_tasks WHERE status = 'succeeded'`) == len(a)+len(b)
	})
	w.mu.Lock()
	for task, k := range w.runs {
		require.Equal(t, 1, k, "task %s ran %d times", task, k)
	}
	w.mu.Unlock()
	requireDrained(t, db)
}

// TestFairShareHeldBacklogSurvivesRedisLossAndRestart: with a held backlog, the dispatcher
// stops and the queue's keys are flushed (the admitted jobs are lost); the tasks holding a
// slot are delivered again (as the reconciler does: a new request event, which goes through
// at once), a new dispatcher starts, and everything drains, each task run exactly once.
func TestFairShareHeldBacklogSurvivesRedisLossAndRestart(t *testing.T) {
	db, q := fairSetup(t)
	ws := createWorkspace(t, db)
	tasks := fairPublish(t, db, ws, 200)
	_, stop := startDispatcher(t, db, fairConfig(4), q.router())
	waitFor(t, 20*time.Second, "held backlog", func() bool {
		return countSQL(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'held'`) == len(tasks)-4
	})
	stop()
	// Redis loses the admitted jobs (this test's prefix only).
	keys, err := q.rdb.Keys(context.Background(), q.prefix+":*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, q.rdb.Unlink(context.Background(), keys...).Err())

	rows, err := db.Owner.Query(context.Background(), `SELECT task_id FROM outbox_fair_slots WHERE workspace_id = $1`, ws)
	require.NoError(t, err)
	lost, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.Len(t, lost, 4)
	fairRepublish(t, db, ws, lost, false)

	startDispatcher(t, db, fairConfig(4), q.router())
	w := startFairWorker(t, db, q, time.Millisecond)
	waitFor(t, 60*time.Second, "the backlog drains", func() bool {
		return countSQL(t, db, `SELECT count(*) FROM fair_tasks WHERE status = 'succeeded'`) == len(tasks)
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Len(t, w.runs, len(tasks))
	for task, k := range w.runs {
		require.Equal(t, 1, k, "task %s ran %d times", task, k)
	}
	requireDrained(t, db)
}

// TestFairShareHoldDelaysNothingElse: a workspace whose queue is full (no worker: its slots
// stay taken) still gets its integration events, its last looks and its redeliveries of
// admitted tasks delivered at once, and its held events show in listing_fair_share_held.
func TestFairShareHoldDelaysNothingElse(t *testing.T) {
	db, q := fairSetup(t)
	ws := createWorkspace(t, db)
	tasks := fairPublish(t, db, ws, 50)
	stream := &recorder{}
	cfg := fairConfig(2)
	cfg.MetricsInterval = 100 * time.Millisecond
	reg := prometheus.NewRegistry()
	d, err := NewDispatcher(cfg, db.App, PublisherMap{testQueue: q.pub, "events": stream}, testLogger(t), reg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 20*time.Second, "held backlog", func() bool {
		return countSQL(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'held'`) == len(tasks)-2
	})
	waitFor(t, 5*time.Second, "listing_fair_share_held", func() bool {
		return testutil.ToFloat64(d.metrics.FairShareHeld.WithLabelValues("fair")) == float64(len(tasks)-2)
	})

	admitted := lookupSlots(t, db, ws)
	var lastLook, integration uuid.UUID
	lastLook, integration = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	_, err = db.Owner.Exec(context.Background(), `
		INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload) VALUES
		($1, $3, 'test.happened', $4, 'thing', $5, jsonb_build_object('thing_id', $5::text, 'last_look', jsonb_build_object('code', 'X'))),
		($2, $3, 'test.integration', 'events', 'thing', 'x', '{}')`, lastLook, integration, ws, testQueue, tasks[10].String())
	require.NoError(t, err)
	committed := time.Now()
	fairRepublish(t, db, ws, admitted[:1], false) // a redelivery of an admitted task
	d.Wake()
	waitFor(t, 5*time.Second, "the last look, the integration event and the redelivery", func() bool {
		return countSQL(t, db, `SELECT count(*) FROM outbox_dispatched WHERE workspace_id = $1`, ws) == 2+3
	})
	t.Logf("delivered %s after the commit", time.Since(committed))
	require.Equal(t, 1, stream.count())
	require.Equal(t, len(tasks)-2, countSQL(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'held'`))
}

func lookupSlots(t *testing.T, db *pgtest.DB, ws uuid.UUID) []uuid.UUID {
	t.Helper()
	rows, err := db.Owner.Query(context.Background(), `SELECT task_id FROM outbox_fair_slots WHERE workspace_id = $1 ORDER BY slot`, ws)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

// TestFairShareReleasesACancelledBacklogAndStaleSlots: a held task that ends (cancelled)
// takes its held events with it; a slot whose task ended before its event was claimed is
// freed by the sweep; with fair share off, held events go back to the claim.
func TestFairShareReleasesACancelledBacklogAndStaleSlots(t *testing.T) {
	db, q := fairSetup(t)
	ws := createWorkspace(t, db)
	tasks := fairPublish(t, db, ws, 20)
	cfg := fairConfig(2)
	cfg.FairShare.StaleSlotAge = 500 * time.Millisecond
	_, stop := startDispatcher(t, db, cfg, q.router())
	waitFor(t, 20*time.Second, "held backlog", func() bool {
		return countSQL(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'held'`) == len(tasks)-2
	})
	admitted := lookupSlots(t, db, ws)
	// Cancel every task not admitted: their held events leave with them.
	require.NoError(t, postgres.InTx(context.Background(), db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE fair_tasks SET status = 'cancelled' WHERE NOT id = ANY($1)`, admitted)
		return err
	}))
	require.Equal(t, 0, countSQL(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'held'`))
	require.Len(t, lookupSlots(t, db, ws), 2)

	// A slot whose task ended without freeing it (set up by hand: a task that ended before
	// its event was claimed) is freed by the sweep once stale.
	for _, sql := range []string{`ALTER TABLE fair_tasks DISABLE TRIGGER fair_tasks_fair_share_end`,
		`UPDATE fair_tasks SET status = 'succeeded' WHERE id = '` + admitted[0].String() + `'`,
		`ALTER TABLE fair_tasks ENABLE TRIGGER fair_tasks_fair_share_end`} {
		_, err := db.Owner.Exec(context.Background(), sql)
		require.NoError(t, err)
	}
	more := fairPublish(t, db, ws, 3)
	waitFor(t, 10*time.Second, "the stale slot freed and given to a held event", func() bool {
		s := lookupSlots(t, db, ws)
		return len(s) == 2 && s[0] != admitted[0] && s[1] != admitted[0]
	})
	require.Equal(t, len(more)-1, countSQL(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'held'`))
	stop()

	// Fair share off: the held events are claimed again; an event whose lease the stopped
	// dispatcher left is claimed once the lease ran out and a full claim of its period looks
	// below the low-water mark (fastConfig: 20 s each).
	startDispatcher(t, db, fastConfig(), q.router())
	waitFor(t, 45*time.Second, "held events released", func() bool {
		return countSQL(t, db, `SELECT count(*) FROM outbox_events`) == 0
	})
}

// TestFairShareLaneAloneGoesPastItsSlots: with 4 slots and AloneFactor 3, one workspace
// alone in the queue (no other has events held there) takes 12 slots, not 4: its jobs keep
// the workers busy while each slot waits for its task's end and its refill. Once another
// workspace has events held in the queue, both get 4: the second is admitted into 4 slots
// of its own, and the first takes no new slot until its tasks ended below 4.
func TestFairShareLaneAloneGoesPastItsSlots(t *testing.T) {
	db, q := fairSetup(t)
	n, other := createWorkspace(t, db), createWorkspace(t, db)
	fairPublish(t, db, n, 40)
	cfg := fairConfig(4)
	cfg.FairShare.AloneFactor = 3
	startDispatcher(t, db, cfg, q.router())
	slotsOf := func(ws uuid.UUID) int {
		return countSQL(t, db, `SELECT count(*) FROM outbox_fair_slots WHERE workspace_id = $1`, ws)
	}
	heldOf := func(ws uuid.UUID) int {
		return countSQL(t, db, `SELECT count(*) FROM outbox_events WHERE status = 'held' AND workspace_id = $1`, ws)
	}
	waitFor(t, 20*time.Second, "N alone in 12 slots, the rest held", func() bool { return slotsOf(n) == 12 && heldOf(n) == 28 })
	waitFor(t, 10*time.Second, "N's 12 jobs in Redis", func() bool {
		return q.rdb.LLen(context.Background(), q.prefix+":"+q.queue+":wait").Val() == 12
	})

	// Another workspace's backlog: held beyond its 4 slots, and from then on N is not alone.
	fairPublish(t, db, other, 10)
	waitFor(t, 20*time.Second, "the other workspace in 4 slots", func() bool { return slotsOf(other) == 4 && heldOf(other) == 6 })
	// 10 of N's 12 admitted tasks end: N keeps 2 slots and gets 2 back, 4 in all.
	ending := lookupSlots(t, db, n)[:10]
	_, err := db.Owner.Exec(context.Background(), `UPDATE fair_tasks SET status = 'succeeded' WHERE id = ANY ($1)`, ending)
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "N refilled to 4 slots", func() bool { return slotsOf(n) == 4 && heldOf(n) == 26 })
	time.Sleep(3 * cfg.FairShare.SweepInterval) // a sweep or two: nothing more admitted
	require.Equal(t, 4, slotsOf(n))
	require.Equal(t, 26, heldOf(n))
	require.Equal(t, 4, slotsOf(other))

	w := startFairWorker(t, db, q, time.Millisecond)
	waitFor(t, 60*time.Second, "both backlogs drain", func() bool {
		return countSQL(t, db, `SELECT count(*) FROM fair_tasks WHERE status = 'succeeded'`) == 50
	})
	w.mu.Lock()
	for task, k := range w.runs {
		require.Equal(t, 1, k, "task %s ran %d times", task, k)
	}
	w.mu.Unlock()
	requireDrained(t, db)
}
