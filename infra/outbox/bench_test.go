package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestOutboxBench measures, in one run against the real PostgreSQL and Redis:
//   - draining OUTBOX_BENCH_N (default 100000) committed events into BullMQ (a) from one
//     workspace and (b) spread over 10,000 workspaces, against Node.js BullMQ addBulk of the
//     same number of jobs (tests/bullmqnode/bench-producer.mjs);
//   - commit-to-job-visible latency at a steady OUTBOX_BENCH_RATE (default 1000) events/s for
//     OUTBOX_BENCH_SECONDS (default 10), for our Dispatcher and for watermill-sql's Postgres
//     subscriber feeding watermill's forwarder (baseline).
//
// Run: OUTBOX_BENCH=1 go test -run '^TestOutboxBench$' -v -timeout 30m ./infra/outbox/
func TestOutboxBench(t *testing.T) {
	if os.Getenv("OUTBOX_BENCH") == "" {
		t.Skip("set OUTBOX_BENCH=1 to run the outbox benchmark")
	}
	n := envInt("OUTBOX_BENCH_N", 100000)
	rate := envInt("OUTBOX_BENCH_RATE", 1000)
	secs := envInt("OUTBOX_BENCH_SECONDS", 10)
	rdb := newRedis(t)
	report := map[string]any{"n": n}

	// Baseline: Node.js BullMQ addBulk.
	nodeRate := 0.0
	q0 := newBullQueue(t, rdb)
	script, _ := filepath.Abs("../../tests/bullmqnode/bench-producer.mjs")
	skipDrain := os.Getenv("OUTBOX_BENCH_SKIP_DRAIN") != ""
	if _, err := os.Stat(script); err == nil && !skipDrain {
		cfg, _ := json.Marshal(map[string]any{"queue": q0.queue, "prefix": q0.prefix, "n": n, "chunk": 1000, "idPrefix": "node"})
		cmd := exec.Command("node", script, string(cfg))
		cmd.Env = append(os.Environ(), "REDIS_URL="+redisURL())
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		require.NoError(t, err)
		var res struct{ N, Ms float64 }
		require.NoError(t, json.Unmarshal(out, &res))
		nodeRate = res.N / (res.Ms / 1000)
		t.Logf("baseline Node.js BullMQ addBulk: %d jobs in %.0f ms = %.0f jobs/s", n, res.Ms, nodeRate)
	} else if !skipDrain {
		t.Logf("baseline Node.js BullMQ addBulk: MISSING (%s not found)", script)
	}
	report["node_addbulk_jobs_per_s"] = nodeRate

	drain := func(name string, workspaces int, target float64, cfg DispatcherConfig) float64 {
		db := pgtest.New(t)
		ctx := context.Background()
		rows, err := db.Owner.Query(ctx, `INSERT INTO workspaces (id, name) SELECT gen_random_uuid(), 'ws' FROM generate_series(1, $1) RETURNING id`, workspaces)
		require.NoError(t, err)
		wss, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		ids := bulkInsert(t, db, wss, n/workspaces)
		_, err = db.Owner.Exec(ctx, `VACUUM ANALYZE outbox_events`)
		require.NoError(t, err)
		q := newBullQueue(t, rdb)
		start := time.Now()
		d, stop := startDispatcher(t, db, cfg, q.router())
		waitFor(t, 20*time.Minute, name+" drained", func() bool { return int(testutilValue(d)) >= len(ids) })
		el := time.Since(start)
		stop()
		// Every event is a job once. Add calls beyond that are retried publishes (a batch
		// Publish that failed, e.g. a Redis read timeout on an overloaded machine, is retried
		// one message at a time; BullMQ keeps the first job of each id): logged, not failed.
		require.Equal(t, len(ids), q.jobs(t, ids))
		if extra := q.adds(t) - len(ids); extra != 0 {
			t.Logf("%s: %d add calls beyond one per event (retried publishes)", name, extra)
			report[name+"_extra_adds"] = extra
		}
		r := float64(len(ids)) / el.Seconds()
		ratio := 0.0
		if nodeRate > 0 {
			ratio = r / nodeRate
		}
		t.Logf("%s: %d events in %s = %.0f events/s (%.2fx Node addBulk; target >= %.1fx: %s)", name, len(ids), el.Round(time.Millisecond), r, ratio,
			target, verdict(ratio >= target))
		report[name+"_events_per_s"] = r
		report[name+"_ratio"] = ratio
		return r
	}
	if !skipDrain {
		cfgA := DispatcherConfig{BatchSize: 1000, Concurrency: 4, MetricsInterval: -1}
		drain("drain_one_workspace", 1, 1.0, cfgA)
		cfgB := DispatcherConfig{BatchSize: 1000, Concurrency: 8, DiscoveryLimit: 10000, MetricsInterval: -1}
		drain("drain_10000_workspaces", 10000, 0.5, cfgB)
	}

	// Latency at a steady rate: our Dispatcher.
	{
		db := pgtest.New(t)
		wss := make([]uuid.UUID, 100)
		for i := range wss {
			wss[i] = createWorkspace(t, db)
		}
		q := newBullQueue(t, rdb)
		vis := newVisibility(q.pub)
		// OUTBOX_BENCH_CONCURRENCY unset: the default Concurrency.
		startDispatcher(t, db, DispatcherConfig{MetricsInterval: -1, Concurrency: envInt("OUTBOX_BENCH_CONCURRENCY", 0)}, PublisherMap{testQueue: vis})
		time.Sleep(300 * time.Millisecond)
		pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
		require.NoError(t, err)
		commits := steadyLoad(t, rate, secs, func(ctx context.Context, id uuid.UUID) error {
			ws := wss[rand.IntN(len(wss))]
			return postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
				return pub.Publish(ctx, testHappened{ID: id, ThingID: id.String(), Version: 1})
			})
		})
		p50, p99, mx := vis.latencies(t, commits)
		t.Logf("dispatcher latency at %d/s: p50 %s p99 %s max %s (%d events; target p99 <= 50ms: %s)", rate, p50, p99, mx, len(commits),
			verdict(p99 <= 50*time.Millisecond))
		report["dispatcher_latency_p50_ms"] = ms(p50)
		report["dispatcher_latency_p99_ms"] = ms(p99)
	}

	// Latency baseline: watermill-sql's Postgres subscriber feeding the forwarder.
	{
		db := pgtest.New(t)
		q := newBullQueue(t, rdb)
		vis := newVisibility(q.pub)
		const fwdTopic = "outbox_bench_forwarder"
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(db.Owner), wsql.SubscriberConfig{
			SchemaAdapter:    wsql.DefaultPostgreSQLSchema{},
			OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
			InitializeSchema: true,
			PollInterval:     10 * time.Millisecond,
		}, watermill.NopLogger{})
		require.NoError(t, err)
		fwd, err := forwarder.NewForwarder(sub, vis, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: fwdTopic})
		require.NoError(t, err)
		fctx, cancel := context.WithCancel(context.Background())
		go func() { _ = fwd.Run(fctx) }()
		t.Cleanup(func() { cancel(); _ = fwd.Close() })
		<-fwd.Running()
		time.Sleep(500 * time.Millisecond) // schema initialized by the subscription
		commits := steadyLoad(t, rate, secs, func(ctx context.Context, id uuid.UUID) error {
			tx, err := db.Owner.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.WithoutCancel(ctx))
			sp, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, nil)
			if err != nil {
				return err
			}
			fp := forwarder.NewPublisher(sp, forwarder.PublisherConfig{ForwarderTopic: fwdTopic})
			b, _ := json.Marshal(testHappened{ID: id, ThingID: id.String(), Version: 1})
			m := message.NewMessage(id.String(), b)
			m.Metadata.Set(MetadataEventType, "test.happened")
			m.SetContext(ctx)
			if err := fp.Publish(testQueue, m); err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
		p50, p99, mx, delivered := vis.latenciesOf(t, commits)
		t.Logf("watermill-sql subscriber + forwarder latency at %d/s: p50 %s p99 %s max %s (%d of %d events delivered within 2 minutes)",
			rate, p50, p99, mx, delivered, len(commits))
		report["watermill_sql_forwarder_latency_p50_ms"] = ms(p50)
		report["watermill_sql_forwarder_latency_p99_ms"] = ms(p99)
		report["watermill_sql_forwarder_delivered"] = delivered
	}
	b, _ := json.Marshal(report)
	fmt.Println("OUTBOX_BENCH_REPORT " + string(b))
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

// steadyLoad commits one event every 1/rate s for secs seconds (several committers, so a
// slow commit does not shift the schedule) and returns each event's commit-return time.
func steadyLoad(t *testing.T, rate, secs int, commit func(ctx context.Context, id uuid.UUID) error) map[string]time.Time {
	total := rate * secs
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var next atomic.Int64
	var mu sync.Mutex
	out := make(map[string]time.Time, total)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(total) {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
				id := uuid.Must(uuid.NewV7())
				if err := commit(context.Background(), id); err != nil {
					t.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				out[id.String()] = now
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// visibility wraps a publisher and records when each message's Publish returned (the job is
// then visible in Redis).
type visibility struct {
	next message.Publisher
	mu   sync.Mutex
	seen map[string]time.Time
}

func newVisibility(next message.Publisher) *visibility {
	return &visibility{next: next, seen: map[string]time.Time{}}
}

func (v *visibility) Publish(topic string, msgs ...*message.Message) error {
	if err := v.next.Publish(topic, msgs...); err != nil {
		return err
	}
	now := time.Now()
	v.mu.Lock()
	for _, m := range msgs {
		if _, ok := v.seen[m.UUID]; !ok {
			v.seen[m.UUID] = now
		}
	}
	v.mu.Unlock()
	return nil
}

func (v *visibility) Close() error { return nil }

func (v *visibility) latencies(t *testing.T, commits map[string]time.Time) (p50, p99, mx time.Duration) {
	p50, p99, mx, delivered := v.latenciesOf(t, commits)
	require.Equal(t, len(commits), delivered, "jobs visible within 2 minutes")
	return p50, p99, mx
}

// latenciesOf waits up to 2 minutes for every commit to be visible and returns the
// percentiles over those that were, and how many were: a baseline that loses events is
// reported, not failed.
func (v *visibility) latenciesOf(t *testing.T, commits map[string]time.Time) (p50, p99, mx time.Duration, delivered int) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		v.mu.Lock()
		n := len(v.seen)
		v.mu.Unlock()
		if n >= len(commits) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var ls []time.Duration
	for id, c := range commits {
		if seen, ok := v.seen[id]; ok {
			ls = append(ls, max(0, seen.Sub(c)))
		}
	}
	if len(ls) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(ls)
	return ls[len(ls)/2], ls[len(ls)*99/100], ls[len(ls)-1], len(ls)
}

var _ domain.Event = testHappened{}
