package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// Test events. testHappened is a well-behaved event registered with the domain registry.
type testHappened struct {
	ID      uuid.UUID `json:"-"`
	ThingID string    `json:"thing_id"`
	Version int       `json:"version"`
	// Store is fair share's lane (fairConfig's LaneField), absent when empty.
	Store string `json:"store_id,omitempty"`
}

func (e testHappened) EventType() string     { return "test.happened" }
func (e testHappened) AggregateType() string { return "thing" }
func (e testHappened) AggregateID() string   { return e.ThingID }
func (e testHappened) EventID() uuid.UUID    { return e.ID }

const testQueue = "test-queue"

var testRoutes = Routes{"test.happened": testQueue}

func redisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func newRedis(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	require.NoError(t, rdb.Ping(context.Background()).Err())
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// bullQueue is a BullMQ queue under a unique prefix, deleted when the test ends.
type bullQueue struct {
	rdb    *redis.Client
	prefix string
	queue  string
	pub    *bullmq.Publisher
}

func newBullQueue(t testing.TB, rdb *redis.Client) *bullQueue {
	t.Helper()
	q := &bullQueue{rdb: rdb, prefix: "outboxtest-" + randomHex(6), queue: testQueue}
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb, Prefix: q.prefix}}, nil)
	require.NoError(t, err)
	q.pub = pub
	t.Cleanup(func() {
		_ = pub.Close()
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, q.prefix+":*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 1000 {
				rdb.Unlink(ctx, keys...)
				keys = keys[:0]
			}
		}
		if len(keys) > 0 {
			rdb.Unlink(ctx, keys...)
		}
	})
	return q
}

// adds is the number of add calls the queue saw (BullMQ INCRs "id" on every add, duplicates
// included).
func (q *bullQueue) adds(t testing.TB) int {
	n, err := q.rdb.Get(context.Background(), q.prefix+":"+q.queue+":id").Int()
	if err == redis.Nil {
		return 0
	}
	require.NoError(t, err)
	return n
}

// jobs counts the job hashes of ids that exist.
func (q *bullQueue) jobs(t testing.TB, ids []uuid.UUID) int {
	ctx := context.Background()
	n := 0
	for i := 0; i < len(ids); i += 500 {
		p := q.rdb.Pipeline()
		var cmds []*redis.IntCmd
		for _, id := range ids[i:min(i+500, len(ids))] {
			cmds = append(cmds, p.Exists(ctx, q.prefix+":"+q.queue+":"+id.String()))
		}
		_, err := p.Exec(ctx)
		require.NoError(t, err)
		for _, c := range cmds {
			n += int(c.Val())
		}
	}
	return n
}

func (q *bullQueue) router() PublisherRouter { return PublisherMap{testQueue: q.pub} }

// createWorkspace inserts a workspace as the owner.
func createWorkspace(t testing.TB, db *pgtest.DB) uuid.UUID {
	t.Helper()
	ws := uuid.New()
	_, err := db.Owner.Exec(context.Background(), `INSERT INTO workspaces (id, name) VALUES ($1, 'ws')`, ws)
	require.NoError(t, err)
	return ws
}

// publishEvents commits n events in ws through the EventPublisher as app_user, in
// transactions of at most 1000 events, and returns their ids.
func publishEvents(t testing.TB, db *pgtest.DB, ws uuid.UUID, n int) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
	require.NoError(t, err)
	ids := make([]uuid.UUID, 0, n)
	for done := 0; done < n; {
		k := min(1000, n-done)
		evs := make([]domain.Event, k)
		batch := make([]uuid.UUID, k)
		for i := range evs {
			batch[i] = uuid.Must(uuid.NewV7())
			evs[i] = testHappened{ID: batch[i], ThingID: batch[i].String(), Version: done + i}
		}
		require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			return pub.Publish(ctx, evs...)
		}))
		ids = append(ids, batch...)
		done += k
	}
	return ids
}

// bulkInsert inserts n pending events per workspace with SQL as the owner (fast setup for
// large tests) and returns their ids.
func bulkInsert(t testing.TB, db *pgtest.DB, wss []uuid.UUID, n int) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Owner.Query(ctx, `
		INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload)
		SELECT gen_random_uuid(), w, 'test.happened', $3, 'thing', g::text, jsonb_build_object('thing_id', g::text, 'version', g)
		FROM unnest($1::uuid[]) AS w, generate_series(1, $2) AS g
		RETURNING id`, wss, n, testQueue)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

// dispatchNow moves events ids to the log as dispatched now, as the owner (test set-up).
func dispatchNow(t testing.TB, db *pgtest.DB, ids ...uuid.UUID) {
	t.Helper()
	_, err := db.Owner.Exec(context.Background(), `
		WITH m AS (DELETE FROM outbox_events WHERE id = ANY($1) RETURNING *)
		INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
		                               event_payload, metadata, attempt_count, created_at, dispatched_at)
		SELECT id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload, metadata,
		       attempt_count, created_at, now() FROM m`, ids)
	require.NoError(t, err)
}

// allIDsOf returns the ids of ws's live events.
func allIDsOf(t testing.TB, db *pgtest.DB, ws uuid.UUID) []uuid.UUID {
	t.Helper()
	rows, err := db.Owner.Query(context.Background(), `SELECT id FROM outbox_events WHERE workspace_id = $1`, ws)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

func statusCounts(t testing.TB, db *pgtest.DB) map[string]int {
	t.Helper()
	rows, err := db.Owner.Query(context.Background(), `SELECT status, count(*)::int FROM outbox_all_events GROUP BY status`)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// startDispatcher runs a Dispatcher until the test ends (or stop is called) and returns it.
func startDispatcher(t testing.TB, db *pgtest.DB, cfg DispatcherConfig, pubs PublisherRouter) (d *Dispatcher, stop func()) {
	t.Helper()
	d, err := NewDispatcher(cfg, db.App, pubs, testLogger(t), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("dispatcher did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return d, stop
}

// recorder is an in-memory message.Publisher that records what it was given, optionally
// failing or delaying.
type recorder struct {
	mu     sync.Mutex
	msgs   []*message.Message
	topics []string
	calls  int
	// fail, when set, is asked per Publish call.
	fail  func(msgs []*message.Message) error
	delay time.Duration
}

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	if r.delay > 0 {
		time.Sleep(r.delay)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail != nil {
		if err := r.fail(msgs); err != nil {
			return err
		}
	}
	for _, m := range msgs {
		r.msgs = append(r.msgs, m)
		r.topics = append(r.topics, topic)
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.msgs))
	for i, m := range r.msgs {
		out[i] = m.UUID
	}
	return out
}

func fastConfig() DispatcherConfig {
	return DispatcherConfig{
		BatchSize:       100,
		Concurrency:     2,
		Lease:           20 * time.Second,
		PublishTimeout:  5 * time.Second,
		PollInterval:    100 * time.Millisecond,
		BackoffBase:     20 * time.Millisecond,
		BackoffMax:      200 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		MetricsInterval: -1,
	}
}

var _ = fmt.Sprintf
