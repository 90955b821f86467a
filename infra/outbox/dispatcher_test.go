package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/testwait"
)

func TestDispatchOverGoChannel(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	gc := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 100}, watermill.NopLogger{})
	t.Cleanup(func() { _ = gc.Close() })
	sub, err := gc.Subscribe(context.Background(), testQueue)
	require.NoError(t, err)

	ctx := WithCorrelationID(context.Background(), "corr-9")
	pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
	require.NoError(t, err)
	ev := testHappened{ID: uuid.New(), ThingID: "t1", Version: 7}
	require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		return pub.Publish(ctx, ev)
	}))

	reg := prometheus.NewRegistry()
	d, err := NewDispatcher(fastConfig(), db.App, PublisherMap{testQueue: gc}, testLogger(t), reg)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(rctx) }()

	var msg *message.Message
	select {
	case msg = <-sub:
		msg.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	require.Equal(t, ev.ID.String(), msg.UUID)
	require.Equal(t, "test.happened", msg.Metadata.Get(MetadataEventType))
	var jd map[string]any
	require.NoError(t, json.Unmarshal(msg.Payload, &jd))
	require.Equal(t, ev.ID.String(), jd["event_id"])
	require.Equal(t, ws.String(), jd["workspace_id"])
	require.Equal(t, "test.happened", jd["event_type"])
	require.Equal(t, map[string]any{"thing_id": "t1", "version": float64(7)}, jd["payload"])
	require.Equal(t, "corr-9", jd["correlation_id"])
	_, err = time.Parse(time.RFC3339Nano, jd["occurred_at"].(string))
	require.NoError(t, err)

	waitFor(t, 5*time.Second, "dispatched", func() bool { return statusCounts(t, db)[StatusDispatched] == 1 })
	cancel()
	require.NoError(t, testwait.Recv(t, done, "the dispatcher's stop"))
	require.Equal(t, 1.0, testutil.ToFloat64(d.metrics.Published.WithLabelValues(testQueue)))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "listing_outbox_dispatch_latency_seconds"))
	st, err := NewOps(db.OperatorPool(t)).Stats(context.Background())
	require.NoError(t, err)
	require.Empty(t, st.ByStatus, "the live table is empty: the event moved to the log")
	require.EqualValues(t, 1, st.Delivered.LastHour, "the log says it was delivered")
	require.Equal(t, map[string]int64{testQueue: 1}, st.Delivered.ByDestination)
	require.Len(t, st.Delivered.PerMinute, 60)
	g, err := ReadGauges(context.Background(), db.App)
	require.NoError(t, err)
	require.Equal(t, Gauges{}, g, "nothing undelivered, no dead letter")
}

func TestNoWorkspaceContextSeesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	other := createWorkspace(t, db)
	ids := bulkInsert(t, db, []uuid.UUID{ws}, 5)
	ctx := context.Background()

	for name, scope := range map[string]postgres.Scope{"no context": {}, "other workspace": {WorkspaceID: other}} {
		err := postgres.InTx(ctx, db.App, scope, func(ctx context.Context, tx pgx.Tx) error {
			var n int
			require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&n))
			require.Zero(t, n, "%s: read", name)
			rows, err := tx.Query(ctx, `SELECT id FROM outbox_events WHERE workspace_id = $1 AND status = 'pending'
				ORDER BY next_attempt_at LIMIT 10 FOR UPDATE SKIP LOCKED`, ws)
			require.NoError(t, err)
			claimed, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			require.NoError(t, err)
			require.Empty(t, claimed, "%s: claim", name)
			tag, err := tx.Exec(ctx, `UPDATE outbox_events SET locked_by = 'x' WHERE id = ANY($1)`, ids)
			require.NoError(t, err)
			require.Zero(t, tag.RowsAffected(), "%s: update", name)
			tag, err = tx.Exec(ctx, `DELETE FROM outbox_events WHERE id = ANY($1)`, ids)
			require.NoError(t, err)
			require.Zero(t, tag.RowsAffected(), "%s: delete", name)
			return nil
		})
		require.NoError(t, err)
	}
	// Nor through the dispatcher's own claim, nor Ops.
	d, err := NewDispatcher(fastConfig(), db.App, PublisherMap{}, nil, nil)
	require.NoError(t, err)
	got, err := d.claim(ctx, []uuid.UUID{uuid.Nil}, "x/1", 10)
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = d.claim(ctx, []uuid.UUID{other}, "x/2", 10)
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = NewOps(db.OperatorPool(t)).Show(ctx, other, ids[0])
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, 5, statusCounts(t, db)[StatusPending])
	// Inserting for another workspace is refused.
	err = postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: other}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload)
			VALUES (gen_random_uuid(), $1, 't', 'd', 'a', 'b', '{}')`, ws)
		return err
	})
	require.Error(t, err)
}

func TestStaleClaimCannotOverwriteNewerClaim(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	bulkInsert(t, db, []uuid.UUID{ws}, 3)
	ctx := context.Background()
	d, err := NewDispatcher(fastConfig(), db.App, PublisherMap{}, nil, nil)
	require.NoError(t, err)

	first, err := d.claim(ctx, []uuid.UUID{ws}, "old/1", 10)
	require.NoError(t, err)
	require.Len(t, first, 3)
	again, err := d.claim(ctx, []uuid.UUID{ws}, "other/1", 10)
	require.NoError(t, err)
	require.Empty(t, again, "a valid lease is not claimed twice")

	_, err = db.Owner.Exec(ctx, `UPDATE outbox_events SET locked_until = now() - interval '1 second'`)
	require.NoError(t, err)
	second, err := d.claim(ctx, []uuid.UUID{ws}, "new/1", 10)
	require.NoError(t, err)
	require.Len(t, second, 3)
	require.Equal(t, 1, second[0].Attempts, "a reclaimed lease counts as an attempt")

	require.NoError(t, d.mark(ctx, "old/1", first, nil, nil))
	require.NoError(t, d.mark(ctx, "old/1", nil, first, []error{errors.New("x"), errors.New("x"), errors.New("x")}))
	require.Equal(t, map[string]int{StatusDispatching: 3}, statusCounts(t, db))
	var lockedBy string
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT DISTINCT locked_by FROM outbox_events`).Scan(&lockedBy))
	require.Equal(t, "new/1", lockedBy)
	require.NoError(t, d.mark(ctx, "new/1", second, nil, nil))
	require.Equal(t, map[string]int{StatusDispatched: 3}, statusCounts(t, db))
}

func TestPoisonEventDeadLettersAndRedrive(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	ids := publishEvents(t, db, ws, 20)
	poison := ids[7].String()
	var healed atomic.Bool
	rec := &recorder{fail: func(msgs []*message.Message) error {
		for _, m := range msgs {
			if m.UUID == poison && !healed.Load() {
				return errors.New(`dial redis://admin:hunter2@10.0.0.1:6379?token=abc failed; Authorization: Bearer eyJhbGciOi.x.y; password=pw1 ` + strings.Repeat("x", 2000))
			}
		}
		return nil
	}}
	cfg := fastConfig()
	cfg.MaxAttempts = 3
	cfg.BatchSize = 50
	startDispatcher(t, db, cfg, PublisherMap{testQueue: rec})

	ctx := context.Background()
	waitFor(t, 20*time.Second, "poison in dead_letter", func() bool {
		c := statusCounts(t, db)
		return c[StatusDeadLetter] == 1 && c[StatusDispatched] == 19
	})
	require.Equal(t, 19, rec.count(), "the others were delivered, once each")
	var attempts int
	var lastErr string
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT attempt_count, last_error FROM outbox_events WHERE id = $1`, ids[7]).Scan(&attempts, &lastErr))
	require.Equal(t, 3, attempts)
	require.LessOrEqual(t, len(lastErr), 500)
	for _, secret := range []string{"hunter2", "token=abc", "eyJhbGciOi", "pw1"} {
		require.NotContains(t, lastErr, secret)
	}
	require.Contains(t, lastErr, "dial redis://[redacted]@10.0.0.1:6379")

	g, err := ReadGauges(ctx, db.App)
	require.NoError(t, err)
	require.EqualValues(t, 1, g.DeadLetters)
	ops := NewOps(db.OperatorPool(t))
	st, err := ops.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.ByStatus[StatusDeadLetter].Events)
	_, err = NewOps(db.App).Stats(ctx)
	require.ErrorContains(t, err, "permission denied", "app_user cannot read the operators' stats")
	list, err := ops.List(ctx, ListParams{WorkspaceID: ws, Status: StatusDeadLetter})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, ids[7], list[0].ID)

	_, err = ops.Redrive(ctx, DeadLetters{WorkspaceID: ws, EventIDs: []uuid.UUID{ids[7]}, By: "ops@example.test"})
	require.Error(t, err, "a reason is required")
	healed.Store(true)
	redriven, err := ops.Redrive(ctx, DeadLetters{WorkspaceID: ws, All: true, By: "ops@example.test", Reason: "queue fixed"})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{ids[7]}, redriven)
	waitFor(t, 10*time.Second, "redriven event delivered", func() bool { return statusCounts(t, db)[StatusDispatched] == 20 })
	require.Equal(t, 20, rec.count())
	require.Equal(t, poison, rec.ids()[19])

	ev, err := ops.Show(ctx, ws, ids[7])
	require.NoError(t, err)
	require.Equal(t, StatusDispatched, ev.Status)
	require.Len(t, ev.Redrives, 1)
	require.Equal(t, "ops@example.test", ev.Redrives[0].By)
	require.Equal(t, "queue fixed", ev.Redrives[0].Reason)
	require.Equal(t, 3, ev.Redrives[0].PreviousAttemptCount)
	require.NotContains(t, ev.Redrives[0].PreviousLastError, "hunter2")
	require.JSONEq(t, fmt.Sprintf(`{"thing_id":%q,"version":7}`, ids[7]), string(ev.Payload))
}

func TestFairnessBacklogDoesNotStarveOtherWorkspace(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	a := createWorkspace(t, db)
	b := createWorkspace(t, db)
	bulkInsert(t, db, []uuid.UUID{a}, 5000)
	bIDs := publishEvents(t, db, b, 1)

	rec := &recorder{}
	cfg := fastConfig()
	cfg.BatchSize = 100
	cfg.Concurrency = 1
	startDispatcher(t, db, cfg, PublisherMap{testQueue: rec})
	waitFor(t, 20*time.Second, "B delivered", func() bool {
		for _, id := range rec.ids() {
			if id == bIDs[0].String() {
				return true
			}
		}
		return false
	})
	pos := -1
	for i, id := range rec.ids() {
		if id == bIDs[0].String() {
			pos = i
		}
	}
	require.LessOrEqual(t, pos, cfg.BatchSize, "B's single event waits for at most one batch of A")

	// Live: while A drains, a new event in C goes out behind at most one batch in flight
	// and one queued batch of A.
	c := createWorkspace(t, db)
	cIDs := publishEvents(t, db, c, 1)
	before := rec.count()
	waitFor(t, 20*time.Second, "C delivered", func() bool {
		for _, id := range rec.ids() {
			if id == cIDs[0].String() {
				return true
			}
		}
		return false
	})
	var posC int
	for i, id := range rec.ids() {
		if id == cIDs[0].String() {
			posC = i
		}
	}
	require.LessOrEqual(t, posC-before, 2*cfg.BatchSize)
	waitFor(t, 60*time.Second, "A drained", func() bool { return statusCounts(t, db)[StatusDispatched] == 5002 })
}

// The wake-up runs after the commit, never inside it: in process (EventPublisher wakes a
// dispatcher of its process on the same database), across processes through a Wakeup (Redis
// PUBLISH or NOTIFY outside the business transaction), and the poll finds what no signal
// announced.
func TestWakeUpAndPollFallback(t *testing.T) {
	t.Parallel()
	quiet := func() DispatcherConfig {
		cfg := fastConfig()
		cfg.PollInterval = time.Hour // only the first discovery and the wake-ups
		cfg.BusyPollInterval = time.Hour
		return cfg
	}
	deliveredWithin := func(t *testing.T, rec *recorder, what string, commit func()) {
		var worst time.Duration
		for i := range 5 {
			start := time.Now()
			commit()
			waitFor(t, 5*time.Second, what, func() bool { return rec.count() == i+1 })
			worst = max(worst, time.Since(start))
		}
		t.Logf("commit-to-publish, %s: worst of 5 = %s", what, worst)
		require.Less(t, worst, time.Second)
	}
	t.Run("in process", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		ws := createWorkspace(t, db)
		rec := &recorder{}
		cfg := quiet()
		cfg.DisableListen = true
		startDispatcher(t, db, cfg, PublisherMap{testQueue: rec})
		time.Sleep(300 * time.Millisecond) // the first discovery has run
		deliveredWithin(t, rec, "in process", func() { publishEvents(t, db, ws, 1) })
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		ws := createWorkspace(t, db)
		rdb := newRedis(t)
		channel := "outbox_wake_test_" + randomHex(6)
		rec := &recorder{}
		cfg := quiet()
		cfg.DisableListen = true
		cfg.WakeRedis, cfg.WakeChannel = rdb, channel
		startDispatcher(t, db, cfg, PublisherMap{testQueue: rec})
		w, err := NewWakeup(WakeupConfig{Redis: rdb, Channel: channel})
		require.NoError(t, err)
		t.Cleanup(w.Close)
		time.Sleep(300 * time.Millisecond) // subscribed
		// The rows are written as another process would: no in-process dispatcher hears of them.
		deliveredWithin(t, rec, "redis", func() { bulkInsert(t, db, []uuid.UUID{ws}, 1); w.Signal(ws) })
	})
	t.Run("notify", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		ws := createWorkspace(t, db)
		rec := &recorder{}
		cfg := quiet()
		startDispatcher(t, db, cfg, PublisherMap{testQueue: rec})
		w, err := NewWakeup(WakeupConfig{Postgres: db.App})
		require.NoError(t, err)
		t.Cleanup(w.Close)
		time.Sleep(300 * time.Millisecond) // listening
		deliveredWithin(t, rec, "notify", func() { bulkInsert(t, db, []uuid.UUID{ws}, 1); w.Signal(ws) })
	})
	t.Run("no signal inside the transaction", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		var triggers int
		require.NoError(t, db.Owner.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_trigger WHERE tgrelid = 'outbox_events'::regclass AND NOT tgisinternal`).Scan(&triggers))
		require.Zero(t, triggers, "outbox_events has a trigger: NOTIFY inside the business transaction serializes writers")
	})
	t.Run("poll only", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		ws := createWorkspace(t, db)
		rec := &recorder{}
		cfg := fastConfig()
		cfg.DisableListen = true
		cfg.PollInterval = 200 * time.Millisecond
		startDispatcher(t, db, cfg, PublisherMap{testQueue: rec})
		time.Sleep(300 * time.Millisecond)
		bulkInsert(t, db, []uuid.UUID{ws}, 3) // no wake-up at all
		waitFor(t, 5*time.Second, "delivery by polling", func() bool { return rec.count() == 3 })
	})
}

// A Wakeup coalesces what was signalled while a send was in flight, and names every
// workspace at most once per message; past maxWakeIDs it asks for a discovery.
func TestWakePayload(t *testing.T) {
	t.Parallel()
	require.Empty(t, wakePayload(nil))
	a, b := uuid.New(), uuid.New()
	p := wakePayload(map[uuid.UUID]struct{}{a: {}, b: {}})
	require.ElementsMatch(t, []string{a.String(), b.String()}, strings.Split(p, ","))
	many := map[uuid.UUID]struct{}{}
	for range maxWakeIDs + 1 {
		many[uuid.New()] = struct{}{}
	}
	require.Equal(t, wakeAll, wakePayload(many))
	require.Less(t, len(wakePayload(map[uuid.UUID]struct{}{a: {}}))*maxWakeIDs, 8000, "a NOTIFY payload must stay under 8000 bytes")
}

func TestGracefulShutdownFinishesInFlightBatch(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	bulkInsert(t, db, []uuid.UUID{ws}, 300)
	started := make(chan struct{}, 10)
	rec := &recorder{delay: 300 * time.Millisecond}
	cfg := fastConfig()
	cfg.BatchSize = 100
	cfg.Concurrency = 1
	_, stop := startDispatcher(t, db, cfg, PublisherRouterFunc(func(string) (message.Publisher, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		return rec, nil
	}))
	testwait.Recv(t, started, "the first publish")
	stop()
	c := statusCounts(t, db)
	require.Zero(t, c[StatusDispatching], "nothing left claimed after shutdown: %v", c)
	require.Equal(t, rec.count(), c[StatusDispatched])
	require.Equal(t, 300, c[StatusDispatched]+c[StatusPending])
	require.Positive(t, c[StatusPending], "claiming stopped")
}

func TestReleaseHandsBackUnpublishedClaims(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	bulkInsert(t, db, []uuid.UUID{ws}, 10)
	d, err := NewDispatcher(fastConfig(), db.App, PublisherMap{}, nil, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rows, err := d.claim(ctx, []uuid.UUID{ws}, "me/1", 100)
	require.NoError(t, err)
	require.Len(t, rows, 10)
	cancel()
	d.deliver(ctx, "me/1", rows, time.Now()) // cancelled before publishing: release
	require.Equal(t, map[string]int{StatusPending: 10}, statusCounts(t, db))
	var n int
	require.NoError(t, db.Owner.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE locked_by IS NULL AND attempt_count = 0`).Scan(&n))
	require.Equal(t, 10, n)
}

// logRows inserts n dispatched events of ws into the log, dispatched at now() - age.
func logRows(t testing.TB, db *pgtest.DB, ws uuid.UUID, n int, age string) {
	t.Helper()
	_, err := db.Owner.Exec(context.Background(), `
		INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
		                               event_payload, metadata, attempt_count, created_at, dispatched_at)
		SELECT gen_random_uuid(), $1, 'test.happened', 'q', 'thing', g::text, '{}', '{}', 0,
		       now() - $3::interval, now() - $3::interval
		FROM generate_series(1, $2) g`, ws, n, age)
	require.NoError(t, err)
}

func countOfSQL(t testing.TB, db *pgtest.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Owner.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// Retention drops the log's day partitions older than it and the default partition's old
// rows; it creates the partitions of the days ahead; owed events and dead letters are never
// touched. app_user may run it with a retention of a day or more, and may not change the
// log otherwise.
func TestCleanupDropsOldLogPartitions(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ws := createWorkspace(t, db)
	bulkInsert(t, db, []uuid.UUID{ws}, 10)
	_, err := db.Owner.Exec(ctx, `UPDATE outbox_events SET status = 'dead_letter' WHERE aggregate_id::int <= 5`)
	require.NoError(t, err)
	// A partition of ten days ago, and rows of nine days ago in the default partition.
	_, err = db.Owner.Exec(ctx, `DO $$ DECLARE d date := (now() AT TIME ZONE 'UTC')::date - 10; BEGIN
		SET LOCAL ROLE listing_owner;
		EXECUTE format('CREATE TABLE %I PARTITION OF outbox_dispatched FOR VALUES FROM (%L) TO (%L)',
		  'outbox_dispatched_' || to_char(d, 'YYYYMMDD'), d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
		END $$`)
	require.NoError(t, err)
	logRows(t, db, ws, 4, "10 days")
	logRows(t, db, ws, 3, "9 days")
	logRows(t, db, ws, 2, "1 minute")
	require.Equal(t, 3, countOfSQL(t, db, `SELECT count(*) FROM outbox_dispatched_default`))

	cl, err := NewCleaner(CleanupConfig{Retention: 7 * 24 * time.Hour}, db.App, nil)
	require.NoError(t, err)
	res, err := cl.Cleanup(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Dropped)
	require.EqualValues(t, 3, res.Deleted)
	require.Equal(t, map[string]int{StatusDispatched: 2, StatusDeadLetter: 5, StatusPending: 5}, statusCounts(t, db))
	require.Equal(t, 4, countOfSQL(t, db, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'outbox_dispatched'::regclass AND c.relname ~ '_[0-9]{8}$'
		  AND c.relname >= 'outbox_dispatched_' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')`), "today and 3 days ahead")
	res, err = cl.Cleanup(ctx)
	require.NoError(t, err)
	require.Equal(t, CleanupResult{}, res)

	_, err = NewCleaner(CleanupConfig{Retention: time.Hour}, db.App, nil)
	require.Error(t, err)
	_, err = db.App.Exec(ctx, `SELECT outbox_dispatched_maintain(interval '1 hour', 3)`)
	require.ErrorContains(t, err, "at least 1 day")
	err = postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
		for _, stmt := range []string{`UPDATE outbox_dispatched SET attempt_count = 9`, `DELETE FROM outbox_dispatched`,
			`TRUNCATE outbox_dispatched`, `DELETE FROM outbox_dispatched_default`, `SELECT count(*) FROM outbox_dispatched_default`} {
			_, err := tx.Exec(ctx, `SAVEPOINT s`)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, stmt)
			require.ErrorContains(t, err, "permission denied", stmt)
			_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`)
			require.NoError(t, err)
		}
		return nil
	})
	require.NoError(t, err)
}

// A day without its partition (retention not run) does not make marking fail: its events go
// to the default partition, and the next retention run leaves that day to it.
func TestMarkingWithoutTodaysPartition(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Owner.Exec(ctx, `DO $$ DECLARE p text; BEGIN
		FOR p IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		         WHERE i.inhparent = 'outbox_dispatched'::regclass AND c.relname ~ '_[0-9]{8}$' LOOP
		  EXECUTE format('DROP TABLE %I', p);
		END LOOP; END $$`)
	require.NoError(t, err)
	ws := createWorkspace(t, db)
	ids := bulkInsert(t, db, []uuid.UUID{ws}, 5)
	rec := &recorder{}
	startDispatcher(t, db, fastConfig(), PublisherMap{testQueue: rec})
	waitFor(t, 10*time.Second, "events dispatched", func() bool { return statusCounts(t, db)[StatusDispatched] == len(ids) })
	require.Equal(t, len(ids), countOfSQL(t, db, `SELECT count(*) FROM outbox_dispatched_default`))

	cl, err := NewCleaner(CleanupConfig{}, db.App, nil)
	require.NoError(t, err)
	res, err := cl.Cleanup(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, res.Created, "the days ahead, not today: the default partition holds today's events")
	require.Zero(t, res.Deleted)
	require.Equal(t, len(ids), countOfSQL(t, db, `SELECT count(*) FROM outbox_dispatched_default`))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	var c DispatcherConfig
	c.setDefaults()
	require.NoError(t, c.Validate())
	bad := c
	bad.Lease = bad.PublishTimeout
	require.Error(t, bad.Validate())
	bad = c
	bad.BatchSize = -1
	require.Error(t, bad.Validate())
	bad = c
	bad.ErrorMaxLen = 5000
	require.Error(t, bad.Validate())
	before := bad
	_ = bad.Validate()
	require.Equal(t, before, bad, "Validate does not mutate")
	var cc CleanupConfig
	cc.setDefaults()
	require.NoError(t, cc.Validate())
	cc.Retention = time.Second
	require.Error(t, cc.Validate())
	_, err := NewEventPublisher(PublisherConfig{})
	require.Error(t, err)
}

func TestSanitizeAndBackoff(t *testing.T) {
	t.Parallel()
	in := `POST https://bucket.s3.amazonaws.com/k/obj?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA: 403; ` +
		`postgres://app:s3cr3t@db/x; {"api_key": "sk-live-1"}; Cookie: sid=abc; secret=shh; Bearer abc.def`
	out := SanitizeText(in, 1000)
	for _, s := range []string{"deadbeef", "AKIA", "s3cr3t", "sk-live-1", "sid=abc", "shh", "abc.def"} {
		require.NotContains(t, out, s)
	}
	require.Contains(t, out, "https://bucket.s3.amazonaws.com/k/obj?[redacted]")
	require.Equal(t, "héllo", SanitizeText("héllo\nworld", 6)[:6], "cut on a rune boundary")
	require.LessOrEqual(t, len(SanitizeText(strings.Repeat("é", 600), 999)), 999)

	prevMax := time.Duration(0)
	for attempt := 1; attempt <= 12; attempt++ {
		d := backoff(100*time.Millisecond, 10*time.Second, attempt)
		ideal := min(100*time.Millisecond<<(attempt-1), 10*time.Second)
		require.GreaterOrEqual(t, d, ideal/2)
		require.LessOrEqual(t, d, ideal)
		prevMax = max(prevMax, d)
	}
	require.LessOrEqual(t, prevMax, 10*time.Second)
}

func testutilValue(d *Dispatcher) float64 {
	return testutil.ToFloat64(d.metrics.Published.WithLabelValues(testQueue))
}

// One round claims several workspaces: the limit applies to each, every row comes back
// tagged with its own workspace, and the nil workspace in the round claims nothing. (That each
// group runs scoped to its own workspace under RLS is TestInWorkspacesOneTransactionEach's.)
func TestClaimRoundScopesEachWorkspace(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	wss := []uuid.UUID{createWorkspace(t, db), createWorkspace(t, db)}
	bulkInsert(t, db, wss, 4)
	d, err := NewDispatcher(fastConfig(), db.App, PublisherMap{}, nil, nil)
	require.NoError(t, err)
	rows, err := d.claim(context.Background(), []uuid.UUID{wss[0], uuid.Nil, wss[1]}, "round/1", 3)
	require.NoError(t, err)
	per := map[uuid.UUID]int{}
	for _, r := range rows {
		per[r.WorkspaceID]++
	}
	require.Equal(t, map[uuid.UUID]int{wss[0]: 3, wss[1]: 3}, per, "the limit applies per workspace")
	var n int
	require.NoError(t, db.Owner.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events
		WHERE status = 'pending' AND locked_by = 'round/1'`).Scan(&n))
	require.Equal(t, 6, n, "the claims committed")
}

// Purge deletes dead letters only, records who, why and what each event was (not its
// payload), and needs both an operator and a reason.
func TestPurgeDeletesDeadLettersOnlyAndRecordsWhy(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws, other := createWorkspace(t, db), createWorkspace(t, db)
	ids := bulkInsert(t, db, []uuid.UUID{ws, other}, 4)
	ctx := context.Background()
	// ws: two dead letters, one dispatched, one pending; other: four dead letters.
	_, err := db.Owner.Exec(ctx, `UPDATE outbox_events SET status = 'dead_letter', attempt_count = 20, last_error = 'boom'
		WHERE workspace_id = $2 OR id = ANY($1)`, []uuid.UUID{ids[0], ids[1]}, other)
	require.NoError(t, err)
	dispatchNow(t, db, ids[2])
	ops := NewOps(db.OperatorPool(t))

	_, err = ops.Purge(ctx, DeadLetters{WorkspaceID: ws, All: true, By: "ops@example.test"})
	require.ErrorContains(t, err, "reason is required")
	_, err = ops.Purge(ctx, DeadLetters{WorkspaceID: ws, All: true, Reason: "obsolete"})
	require.ErrorContains(t, err, "operator")
	_, err = ops.Purge(ctx, DeadLetters{WorkspaceID: ws, By: "ops@example.test", Reason: "obsolete"})
	require.ErrorContains(t, err, "name events or set All")

	// Named events that are not dead letters, or belong to another workspace, are left alone.
	purged, err := ops.Purge(ctx, DeadLetters{WorkspaceID: ws, EventIDs: []uuid.UUID{ids[2], ids[3], ids[4]}, By: "ops@example.test", Reason: "obsolete"})
	require.NoError(t, err)
	require.Empty(t, purged)
	purged, err = ops.Purge(ctx, DeadLetters{WorkspaceID: ws, All: true, By: "ops@example.test", Reason: "obsolete"})
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{ids[0], ids[1]}, purged)

	var left []string
	rows, err := db.Owner.Query(ctx, `SELECT (workspace_id = $1)::text || ':' || status FROM outbox_all_events ORDER BY 1`, ws)
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"false:dead_letter", "false:dead_letter", "false:dead_letter", "false:dead_letter",
		"true:dispatched", "true:pending"}, left)

	var n int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM outbox_purges WHERE workspace_id = $1 AND purged_by = 'ops@example.test'
		AND reason = 'obsolete' AND event_type = 'test.happened' AND destination = $2 AND attempt_count = 20 AND last_error = 'boom'
		AND event_id = ANY($3)`, ws, testQueue, []uuid.UUID{ids[0], ids[1]}).Scan(&n))
	require.Equal(t, 2, n)
}

// When a publish fails because the destination is unreachable, the dispatcher does not try
// every message alone (each would wait for its own timeout): an unreachable batch fails
// whole, and in the one-by-one fallback (after a batch failure of another kind) the first
// single publish that fails as unreachable fails the rest with it. A message-specific
// failure still falls back to one by one.
func TestUnreachableDestinationStopsOneByOneFallback(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	bulkInsert(t, db, []uuid.UUID{ws}, 50)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	rec := &recorder{fail: func([]*message.Message) error { return refused }}
	d, err := NewDispatcher(fastConfig(), db.App, PublisherMap{testQueue: rec}, nil, nil)
	require.NoError(t, err)
	ctx := context.Background()
	rows, err := d.claim(ctx, []uuid.UUID{ws}, "down/1", 100)
	require.NoError(t, err)
	require.Len(t, rows, 50)
	d.deliver(ctx, "down/1", rows, time.Now())
	require.Equal(t, 1, rec.calls, "an unreachable batch is not retried one by one")
	require.Equal(t, map[string]int{StatusPending: 50}, statusCounts(t, db), "all failed, back to pending")

	_, err = db.Owner.Exec(ctx, `UPDATE outbox_events SET next_attempt_at = now()`)
	require.NoError(t, err)
	rec = &recorder{fail: func(msgs []*message.Message) error {
		if len(msgs) > 1 {
			return errors.New("script error")
		}
		return refused
	}}
	d, err = NewDispatcher(fastConfig(), db.App, PublisherMap{testQueue: rec}, nil, nil)
	require.NoError(t, err)
	rows, err = d.claim(ctx, []uuid.UUID{ws}, "down/2", 100)
	require.NoError(t, err)
	d.deliver(ctx, "down/2", rows, time.Now())
	require.Equal(t, 2, rec.calls, "one batch call, one single call, then stop")

	_, err = db.Owner.Exec(ctx, `UPDATE outbox_events SET next_attempt_at = now()`)
	require.NoError(t, err)
	poison := errors.New("script error: bad job")
	rec2 := &recorder{fail: func(msgs []*message.Message) error {
		if len(msgs) > 1 || msgs[0].UUID == rows[0].ID.String() {
			return poison
		}
		return nil
	}}
	d2, err := NewDispatcher(fastConfig(), db.App, PublisherMap{testQueue: rec2}, nil, nil)
	require.NoError(t, err)
	_, err = db.Owner.Exec(ctx, `UPDATE outbox_events SET next_attempt_at = now()`)
	require.NoError(t, err)
	rows, err = d2.claim(ctx, []uuid.UUID{ws}, "poison/1", 100)
	require.NoError(t, err)
	d2.deliver(ctx, "poison/1", rows, time.Now())
	require.Equal(t, 51, rec2.calls, "one batch call, then each message alone")
	require.Equal(t, 49, rec2.count())
}

// A lease that expires for the MaxAttempts-th time sends its event to dead_letter instead of
// claiming it again (an event that crashes every dispatcher stops there), and a row whose
// metadata is not an object of strings is still claimed and delivered, without it.
func TestClaimDeadLettersRepeatedlyExpiredLeasesAndToleratesMetadata(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	ids := bulkInsert(t, db, []uuid.UUID{ws}, 3)
	ctx := context.Background()
	cfg := fastConfig()
	cfg.MaxAttempts = 5
	_, err := db.Owner.Exec(ctx, `UPDATE outbox_events SET locked_by = 'gone/1',
		locked_until = now() - interval '1 second', attempt_count = CASE WHEN id = $1 THEN 4 ELSE 0 END
		WHERE id = ANY($2)`, ids[0], []uuid.UUID{ids[0], ids[1]})
	require.NoError(t, err)
	_, err = db.Owner.Exec(ctx, `UPDATE outbox_events SET metadata = '{"x": 1}' WHERE id = $1`, ids[2])
	require.NoError(t, err)

	d, err := NewDispatcher(cfg, db.App, PublisherMap{}, nil, nil)
	require.NoError(t, err)
	rows, err := d.claim(ctx, []uuid.UUID{ws}, "next/1", 10)
	require.NoError(t, err)
	got := map[uuid.UUID]claimed{}
	for _, r := range rows {
		got[r.ID] = r
	}
	require.Len(t, got, 2)
	require.Equal(t, 1, got[ids[1]].Attempts, "an expired lease counts as an attempt")
	require.Contains(t, got, ids[2])
	require.Nil(t, got[ids[2]].Metadata)
	_, err = toMessage(got[ids[2]])
	require.NoError(t, err)

	var status, lastErr string
	var attempts int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT status, attempt_count, last_error FROM outbox_events WHERE id = $1`, ids[0]).
		Scan(&status, &attempts, &lastErr))
	require.Equal(t, StatusDeadLetter, status)
	require.Equal(t, 5, attempts)
	require.Contains(t, lastErr, "lease expired")
}

// hanging is a publisher that never answers: each Publish waits for its context (the
// dispatcher's PublishTimeout, within the round's deadline).
type hanging struct{ calls atomic.Int32 }

func (h *hanging) Publish(_ string, msgs ...*message.Message) error {
	h.calls.Add(1)
	<-msgs[0].Context().Done()
	return msgs[0].Context().Err()
}

func (*hanging) Close() error { return nil }

// Hanging destinations cannot hold a round past its leases: publishing stops at the round's
// deadline (Lease - Lease/5 after the claim); the rows tried are marked failed, those not
// tried are released without an attempt counted, all before the leases end.
func TestRoundDeadlineReleasesWhatItCouldNotTry(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	ids := bulkInsert(t, db, []uuid.UUID{ws}, 30)
	ctx := context.Background()
	_, err := db.Owner.Exec(ctx, `UPDATE outbox_events SET destination = 'd' || (aggregate_id::int % 3)`)
	require.NoError(t, err)
	h := &hanging{}
	cfg := fastConfig()
	cfg.Lease, cfg.PublishTimeout = time.Second, 450*time.Millisecond
	d, err := NewDispatcher(cfg, db.App, PublisherMap{"d0": h, "d1": h, "d2": h}, nil, nil)
	require.NoError(t, err)
	start := time.Now()
	rows, err := d.claim(ctx, []uuid.UUID{ws}, "hang/1", 100)
	require.NoError(t, err)
	require.Len(t, rows, len(ids))
	d.deliver(ctx, "hang/1", rows, start)
	require.Less(t, time.Since(start), cfg.Lease, "the round ended within its leases")
	require.EqualValues(t, 2, h.calls.Load(), "two destinations tried (timeout, then the round's deadline), the third not")

	var tried, released int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE status = 'pending' AND attempt_count = 1),
		count(*) FILTER (WHERE status = 'pending' AND attempt_count = 0 AND locked_by IS NULL)
		FROM outbox_events`).Scan(&tried, &released))
	require.Equal(t, 20, tried)
	require.Equal(t, 10, released)
}

// A round takes fresh workspaces first, each workspace once, and keeps a place for a
// continuing backlog so a steady stream of fresh ones cannot starve it.
func TestWorkspaceQueueRounds(t *testing.T) {
	q := newWSQueue()
	ctx := context.Background()
	ids := make([]uuid.UUID, 6)
	for i := range ids {
		ids[i] = uuid.New()
	}
	q.requeue(ids[0])
	q.push(ids[1], ids[2], ids[3], ids[1])
	q.requeue(ids[2]) // already queued: stays where it is
	got, ok := q.pop(ctx, 3)
	require.True(t, ok)
	require.Equal(t, []uuid.UUID{ids[1], ids[2], ids[0]}, got, "two fresh, then the backlog")
	got, _ = q.pop(ctx, 3)
	require.Equal(t, []uuid.UUID{ids[3]}, got)
	q.push(ids[4], ids[5])
	got, _ = q.pop(ctx, 1)
	require.Equal(t, []uuid.UUID{ids[4]}, got, "a round of one takes the fresh first")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	got, _ = q.pop(ctx, 5)
	require.Equal(t, []uuid.UUID{ids[5]}, got)
	_, ok = q.pop(cctx, 5)
	require.False(t, ok, "an empty queue waits until cancelled")
}

// A workspace is claimed by one round at a time: queued again while its claim runs, it keeps
// its place, passed over, until the claim ends.
func TestWorkspaceQueueOneClaimAtATime(t *testing.T) {
	q := newWSQueue()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // a pop still waiting when the test fails returns
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	q.push(a)
	got, _ := q.pop(ctx, 3)
	require.Equal(t, []uuid.UUID{a}, got)
	q.push(a, b, c)
	got, _ = q.pop(ctx, 1)
	require.Equal(t, []uuid.UUID{b}, got, "a's claim runs: passed over")
	q.claimed([]uuid.UUID{a, b})
	got, _ = q.pop(ctx, 3)
	require.Equal(t, []uuid.UUID{a, c}, got, "a kept its place")

	q.push(a)
	done := make(chan []uuid.UUID, 1)
	go func() { got, _ := q.pop(ctx, 3); done <- got }()
	select {
	case <-done:
		t.Fatal("popped a workspace whose claim runs")
	case <-time.After(50 * time.Millisecond):
	}
	q.claimed([]uuid.UUID{a, c})
	select {
	case got := <-done:
		require.Equal(t, []uuid.UUID{a}, got)
	case <-time.After(5 * time.Second):
		t.Fatal("the claim's end did not wake pop")
	}
}

// Discovery (outbox_due_workspaces, a loose index scan since sql/015) returns each
// workspace with a due pending row or an expired lease once, the longest-waiting first, up
// to the limit; rows not yet due, leases still valid, and dispatched or dead-lettered rows
// make no workspace due.
func TestDiscoveryFindsDueWorkspacesOldestFirst(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	wss := make([]uuid.UUID, 7)
	for i := range wss {
		wss[i] = createWorkspace(t, db)
	}
	bulkInsert(t, db, wss, 3)
	set := func(ws uuid.UUID, sql string) {
		t.Helper()
		_, err := db.Owner.Exec(ctx, `UPDATE outbox_events SET `+sql+` WHERE workspace_id = $1`, ws)
		require.NoError(t, err)
	}
	set(wss[0], `next_attempt_at = now() - interval '1 minute'`)                                                               // due, second oldest
	set(wss[1], `next_attempt_at = now() + interval '1 minute'`)                                                               // not yet due
	set(wss[2], `next_attempt_at = now() - interval '2 minutes', locked_by = 'x', locked_until = now() - interval '1 minute'`) // expired lease, oldest
	set(wss[3], `locked_by = 'x', locked_until = now() + interval '1 minute'`)                                                 // valid lease
	set(wss[4], `next_attempt_at = now() - interval '1 hour'`)                                                                 // done
	dispatchNow(t, db, allIDsOf(t, db, wss[4])...)
	set(wss[5], `status = 'dead_letter', next_attempt_at = now() - interval '1 hour'`) // dead
	set(wss[6], `next_attempt_at = now() - interval '30 seconds'`)                     // due, third
	// One row of wss[1] is due after all: the workspace is due from that row.
	_, err := db.Owner.Exec(ctx, `UPDATE outbox_events SET next_attempt_at = now() - interval '10 seconds'
		WHERE id = (SELECT id FROM outbox_events WHERE workspace_id = $1 LIMIT 1)`, wss[1])
	require.NoError(t, err)

	discover := func(limit int) []uuid.UUID {
		t.Helper()
		rows, err := db.App.Query(ctx, `SELECT workspace_id FROM outbox_due_workspaces(now(), $1)`, limit)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		return ids
	}
	require.Equal(t, []uuid.UUID{wss[2], wss[0], wss[6], wss[1]}, discover(100))
	require.Equal(t, []uuid.UUID{wss[2], wss[0]}, discover(2))

	// With a mark: only the events due since it make a workspace due.
	since := func(ago string) []uuid.UUID {
		t.Helper()
		rows, err := db.App.Query(ctx, `SELECT workspace_id FROM outbox_due_workspaces(now(), 100, now() - $1::interval)`, ago)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		return ids
	}
	require.Equal(t, []uuid.UUID{wss[6], wss[1]}, since("45 seconds"))
	require.Equal(t, []uuid.UUID{wss[2], wss[0], wss[6], wss[1]}, since("1 day"))
}

// TestDiscoveryUnderHeldSnapshot: while a snapshot is held, the events dispatched since leave
// dead entries in outbox_events_due. A discovery from its mark does not visit their rows (it
// reads about 100 buffers here); a full one visits every one (the test's control: about
// 20,000).
func TestDiscoveryUnderHeldSnapshot(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	wss := make([]uuid.UUID, 10)
	for i := range wss {
		wss[i] = createWorkspace(t, db)
	}
	held, err := db.Owner.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Rollback(context.Background()) })
	_, err = held.Exec(ctx, `SELECT count(*) FROM workspaces`)
	require.NoError(t, err)
	// The events of the workspaces interleave in the heap, as they commit; they were due a
	// minute before the mark, however fast this machine inserts and dispatches them.
	rows, err := db.Owner.Query(ctx, `
		INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload, next_attempt_at)
		SELECT gen_random_uuid(), w, 'test.happened', $2, 'thing', g::text, '{}', now() - interval '1 minute'
		FROM generate_series(1, 2000) AS g, unnest($1::uuid[]) AS w ORDER BY g, w
		RETURNING id`, wss, testQueue)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	dispatchNow(t, db, ids...)
	var mark time.Time
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT now()`).Scan(&mark))
	bulkInsert(t, db, wss, 1)

	discover := func(since time.Time) (found, buffers int64) {
		t.Helper()
		tx, err := db.App.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var plan string
		require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM outbox_due_workspaces(now(), 1000, '`+
			since.UTC().Format(time.RFC3339Nano)+`')`).Scan(&plan))
		require.NoError(t, tx.QueryRow(ctx, `SELECT (($1::jsonb)->0->'Plan'->>'Actual Rows')::bigint,
			(($1::jsonb)->0->'Plan'->>'Shared Hit Blocks')::bigint + (($1::jsonb)->0->'Plan'->>'Shared Read Blocks')::bigint`, plan).Scan(&found, &buffers))
		return found, buffers
	}
	fullFound, full := discover(time.Time{})
	markFound, marked := discover(mark.Add(-time.Second))
	t.Logf("discovery past 20,000 dead entries: %d buffers from its mark, %d full", marked, full)
	require.Equal(t, int64(len(wss)), fullFound)
	require.Equal(t, int64(len(wss)), markFound, "from its mark, discovery finds every workspace with an event due since")
	require.Greater(t, full, int64(10000), "a full discovery visits the dead entries' rows (the test's control)")
	require.Less(t, marked, int64(1000), "from its mark, discovery does not visit the dead entries' rows")
}
