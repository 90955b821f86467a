package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/console"
	"github.com/listingkit/listing/infra/ratelimit"
)

var overviewFlows = []console.Flow{
	{Name: "material_transfer", Queue: "material-transfer", Table: "material_transfers", Operation: "material_transfer",
		RequestEvent: "material_transfer.requested"},
	{Name: "ai_task", Queue: "ai-task", Table: "ai_tasks", Operation: "ai_task", RequestEvent: "ai_task.requested"},
}

// logged inserts, as the owner, a delivered event of the log committed at at.
func (b pagesBundle) logged(t *testing.T, ws uuid.UUID, typ, dest, aggType, aggID, payload string, at time.Time) {
	t.Helper()
	_, err := b.db.Owner.Exec(context.Background(), `INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination,
			aggregate_type, aggregate_id, event_payload, metadata, attempt_count, created_at, dispatched_at)
		VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6, '{}', 1, $7::timestamptz, $7::timestamptz + interval '20 milliseconds')`,
		ws, typ, dest, aggType, aggID, payload, at)
	require.NoError(t, err)
}

// The overview's sample reads a minute of the log (operations accepted and finished with
// their latencies, deliveries, redeliveries and last looks) and the tasks now; the page shows
// the flows and the outbox now and draws the samples.
func TestOverview(t *testing.T) {
	b := setupPagesWith(t, func(c *console.Config) { c.Flows = overviewFlows; c.Queues = []string{"material-transfer"} })
	ctx := context.Background()
	ws := b.workspace(t)
	now := time.Now()
	minute := now.Add(-2 * time.Minute).Truncate(time.Minute)

	// Two operations accepted in the minute: one succeeded (started 2 s and finished 5 s after
	// its commit), one failed; their status events and the request events in the log.
	ok := transfer(t, b, ws, "succeeded", "", 1, now.Sub(minute.Add(10*time.Second)))
	bad := transfer(t, b, ws, "failed", "PLATFORM_UNAVAILABLE", 3, now.Sub(minute.Add(11*time.Second)))
	_, err := b.db.Owner.Exec(ctx, `UPDATE operations SET created_at = $2 WHERE id = $1`, ok, minute.Add(10*time.Second))
	require.NoError(t, err)
	_, err = b.db.Owner.Exec(ctx, `UPDATE operations SET created_at = $2 WHERE id = $1`, bad, minute.Add(11*time.Second))
	require.NoError(t, err)
	status := func(op uuid.UUID, st string, started *time.Time) string {
		p := `{"operation_id":"` + op.String() + `","type":"material_transfer","status":"` + st + `"`
		if started != nil {
			p += `,"started_at":"` + started.UTC().Format(time.RFC3339Nano) + `"`
		}
		return p + "}"
	}
	started := minute.Add(12 * time.Second)
	b.logged(t, ws, "operation.status_changed", "stream", "operation", ok.String(), status(ok, "pending", nil), minute.Add(10*time.Second))
	b.logged(t, ws, "operation.status_changed", "stream", "operation", bad.String(), status(bad, "pending", nil), minute.Add(11*time.Second))
	b.logged(t, ws, "operation.status_changed", "stream", "operation", ok.String(), status(ok, "succeeded", &started), minute.Add(15*time.Second))
	b.logged(t, ws, "operation.status_changed", "stream", "operation", bad.String(), status(bad, "failed", &started), minute.Add(41*time.Second))
	taskA, taskB := uuid.NewString(), uuid.NewString()
	req := `{"transfer_id":"x"}`
	b.logged(t, ws, "material_transfer.requested", "material-transfer", "material_transfer", taskA, req, minute.Add(10*time.Second))
	b.logged(t, ws, "material_transfer.requested", "material-transfer", "material_transfer", taskB, req, minute.Add(11*time.Second))
	b.logged(t, ws, "material_transfer.requested", "material-transfer", "material_transfer", taskB, req, minute.Add(30*time.Second))
	b.logged(t, ws, "material_transfer.requested", "material-transfer", "material_transfer", taskA,
		`{"transfer_id":"x","last_look":{"code":"PLATFORM_UNAVAILABLE","message":"m"}}`, minute.Add(40*time.Second))
	// Now: three waiting (the oldest 30 min), one running.
	for _, ago := range []time.Duration{30 * time.Minute, time.Minute, time.Second} {
		transfer(t, b, ws, "pending", "", 0, ago)
	}
	transfer(t, b, ws, "running", "", 1, time.Second)

	// The sampler's clock stays at now: both samples see the same last minute (a minute
	// turning between them would add one).
	s, err := console.New(console.Config{Pool: b.db.OperatorPool(t), Flows: overviewFlows, Operators: operators(),
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.NoError(t, s.Sample(ctx))
	require.NoError(t, s.Sample(ctx), "a minute sampled again is left alone")

	var accepted, succeeded, failed, delivered, redelivered, lastLooks, waiting, running int64
	var startP50, finishP99 float64
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT accepted, succeeded, failed, delivered, redelivered, last_looks, waiting, running,
			start_p50, finish_p99
		FROM overview_flow_samples WHERE minute = $1 AND flow = 'material_transfer'`, minute).
		Scan(&accepted, &succeeded, &failed, &delivered, &redelivered, &lastLooks, &waiting, &running, &startP50, &finishP99))
	require.Equal(t, []int64{2, 1, 1, 4, 1, 1, 3, 1}, []int64{accepted, succeeded, failed, delivered, redelivered, lastLooks, waiting, running})
	require.InDelta(t, 1.5, startP50, 0.01, "started 2 s and 1 s after the commits")
	require.InDelta(t, 29.7, finishP99, 0.1, "finished 5 s and 30 s after the commits")
	var samples, outboxDelivered int64
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT count(*), sum(delivered) FROM overview_outbox_samples`).Scan(&samples, &outboxDelivered))
	require.Equal(t, int64(10), samples, "the last ten minutes, each once")
	require.Equal(t, int64(8), outboxDelivered)

	code, body := b.c.get("/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<meta http-equiv="refresh" content="60">`)
	require.Regexp(t, `<th scope="row"><a href="/\?flow=material_transfer">material_transfer</a></th><td>3</td><td>0</td><td>30m\ds</td><td>1</td><td>0</td><td><a href="/failures\?flow=material_transfer&amp;since=1h">1</a></td>`, body)
	for _, id := range []string{"throughput-chart", "latency-chart", "depth-chart", "reconciliations-chart", "delivered-chart", "owed-chart"} {
		require.Regexp(t, `<svg class="chart" id="`+id+`"`, body, id)
	}
	require.Len(t, regexp.MustCompile(`<polyline `).FindAllString(body, -1), 7, "every chart's lines drawn")
	require.Len(t, regexp.MustCompile(`<circle `).FindAllString(body, -1), 4, "the latencies' one point each")

	code, body = b.c.get("/?flow=ai_task&range=day")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Operations per ten minutes, ai_task")
	for _, q := range []string{"flow=nope", "range=week"} {
		code, _ = b.c.get("/?" + q)
		require.Equal(t, http.StatusBadRequest, code, q)
	}
}

// fillMinute inserts, as the owner, n material transfer operations committed in minute m of
// ws, each with its pending and succeeded operation.status_changed and its request event in
// the log (commit → start i%50 × 20 ms, commit → finish i%100 × 30 ms + 10 ms, i its rank);
// the request events of the first redelivered are redeliveries (their task's first request
// event is in the minute before).
func (b pagesBundle) fillMinute(t *testing.T, ws uuid.UUID, m time.Time, n, redelivered int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := b.db.Owner.Exec(ctx, `
		WITH o AS MATERIALIZED (
		  SELECT gen_random_uuid() AS id, gen_random_uuid() AS task, i,
		         $2::timestamptz + (i * 50.0 / $3) * interval '1 second' AS t
		  FROM generate_series(0, $3 - 1) i
		), ops AS (
		  INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id, version, created_at, updated_at)
		  SELECT id, $1, 'material_transfer', 'succeeded', 'media', gen_random_uuid(), 3, t, t FROM o
		)
		INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
		                               metadata, attempt_count, created_at, dispatched_at)
		SELECT gen_random_uuid(), $1, typ, dest, agg, agg_id, payload, '{}', 1, at, at + interval '5 ms'
		FROM (
		  SELECT 'operation.status_changed' AS typ, 'stream' AS dest, 'operation' AS agg, id::text AS agg_id,
		         jsonb_build_object('operation_id', id, 'type', 'material_transfer', 'status', 'pending') AS payload, t AS at FROM o
		  UNION ALL
		  SELECT 'operation.status_changed', 'stream', 'operation', id::text,
		         jsonb_build_object('operation_id', id, 'type', 'material_transfer', 'status', 'succeeded',
		                            'started_at', t + (i % 50) * interval '20 ms'),
		         t + (i % 100) * interval '30 ms' + interval '10 ms' FROM o
		  UNION ALL
		  SELECT 'material_transfer.requested', 'material-transfer', 'material_transfer', task::text,
		         jsonb_build_object('transfer_id', task), t FROM o
		  UNION ALL
		  SELECT 'material_transfer.requested', 'material-transfer', 'material_transfer', task::text,
		         jsonb_build_object('transfer_id', task), t - interval '1 minute' FROM o WHERE i < $4
		) e ORDER BY at`, ws, m, n, redelivered)
	require.NoError(t, err)
}

// A minute's sample reads other tables for a bounded sample only: at ten times the volume
// it reads operations and probes the log's aggregate index no more (at most sampleSize each,
// 1,000), its counts stay exact and its estimates say what they are from; under the sample
// size everything is exact. A round reads each minute's rows of the log once, and first
// summarizes the log's BRIN index once per range, so that a minute's read visits that
// minute's pages, not every page written after it.
func TestOverviewSampleBounded(t *testing.T) {
	b := setupPagesWith(t, func(c *console.Config) { c.Flows = overviewFlows })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws := b.workspace(t)
	now := time.Now()
	small, large, larger := now.Add(-6*time.Minute).Truncate(time.Minute), now.Add(-4*time.Minute).Truncate(time.Minute),
		now.Add(-2*time.Minute).Truncate(time.Minute)
	b.fillMinute(t, ws, small, 800, 40)
	b.fillMinute(t, ws, large, 2000, 1000)

	// The heap blocks a read of minute m visits over the log's BRIN index (as the sampler's
	// statement reads it).
	blocks := func(m time.Time) int64 {
		tx, err := b.db.Owner.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
		require.NoError(t, err)
		var plan []map[string]any
		require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM outbox_dispatched
			WHERE dispatched_at >= $1 AND dispatched_at < $2`, m, m.Add(time.Minute)).Scan(&plan))
		// Its rows read are not the sampler's: this backend's statistics go out as it ends.
		_, err = tx.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n float64
		var walk func(node map[string]any)
		walk = func(node map[string]any) {
			if node["Node Type"] == "Bitmap Heap Scan" {
				x, _ := node["Lossy Heap Blocks"].(float64)
				y, _ := node["Exact Heap Blocks"].(float64)
				n += x + y
			}
			children, _ := node["Plans"].([]any)
			for _, c := range children {
				walk(c.(map[string]any))
			}
		}
		walk(plan[0]["Plan"].(map[string]any))
		return int64(n)
	}

	// The sampler's rounds: the first when the large minute has just been sampled (its clock
	// 5 s into the larger minute), the second at now, after the larger minute was written.
	pool := b.db.OperatorPool(t)
	sampler := func(at time.Time) *console.Server {
		s, err := console.New(console.Config{Pool: pool, Flows: overviewFlows, Operators: operators(),
			Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return at }})
		require.NoError(t, err)
		return s
	}
	require.NoError(t, sampler(larger.Add(5*time.Second)).Sample(ctx))

	// The rows of the log PostgreSQL counts read on its partitions: returned by scans of the
	// heap (how summarizing a BRIN range reads it) and fetched by bitmap heap scans (how a
	// read over the BRIN index does), once the sampler's connections sent their statistics
	// (a backend sends them before it answers, when asked to by pg_stat_force_next_flush).
	logRows := func() (returned, fetched int64) {
		conns := pool.AcquireAllIdle(ctx)
		for _, c := range conns {
			_, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
			require.NoError(t, err)
			c.Release()
		}
		require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT sum(pg_stat_get_tuples_returned(h.inhrelid))::bigint,
				sum(pg_stat_get_tuples_fetched(h.inhrelid))::bigint
			FROM pg_inherits h WHERE h.inhparent = 'outbox_dispatched'::regclass`).Scan(&returned, &fetched))
		return returned, fetched
	}
	b.fillMinute(t, ws, larger, 20000, 10000)
	var written int64
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT count(*) FROM outbox_dispatched WHERE dispatched_at >= $1`,
		larger.Add(-time.Minute)).Scan(&written))
	before := blocks(large)
	returned0, fetched0 := logRows()
	require.NoError(t, sampler(now).Sample(ctx))
	returned1, fetched1 := logRows()

	// The round summarized the log's BRIN index first: the large minute's read no longer
	// visits every page written after it (a range never summarized matches every read).
	after := blocks(large)
	t.Logf("heap blocks read for the large minute: %d before the round, %d after", before, after)
	require.Less(t, after*4, before, "the BRIN ranges after the minute summarized")

	summarized, readRows := returned1-returned0, fetched1-fetched0
	t.Logf("the round after %d rows were written (the larger minute and the one before it): %d rows summarized, %d read",
		written, summarized, readRows)
	// The round summarized the ranges written since the last round (and the one that round
	// left for being incomplete) once, and read the two minutes once each: each minute's
	// events delivered within sampleLag, ten seconds, after it, so the two reads share ten
	// seconds of rows (about 1.17 times the rows written); a second read of a minute (or a
	// second summary of the ranges) comes to twice as many or more.
	require.LessOrEqual(t, summarized, written+written/5, "each BRIN range summarized once")
	require.LessOrEqual(t, readRows, written+written/2, "each minute's rows read once")
	require.Greater(t, readRows, written/2, "the log read as counted")

	type row struct {
		accepted, succeeded, delivered, redelivered int64
		startP50, startP99, finishP50, finishP99    float64
		latencySample, redeliveredSample            *int64
	}
	read := func(m time.Time) row {
		var r row
		var p50, p99, f50, f99 float32
		require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT accepted, succeeded, delivered, redelivered, start_p50, start_p99,
				finish_p50, finish_p99, latency_sample, redelivered_sample
			FROM overview_flow_samples WHERE minute = $1 AND flow = 'material_transfer'`, m).
			Scan(&r.accepted, &r.succeeded, &r.delivered, &r.redelivered, &p50, &p99, &f50, &f99, &r.latencySample, &r.redeliveredSample))
		r.startP50, r.startP99, r.finishP50, r.finishP99 = float64(p50), float64(p99), float64(f50), float64(f99)
		return r
	}
	// exact is what every operation of minute m gives: the percentiles over all of them.
	exact := func(m time.Time) (p50, p99, f50, f99 float64) {
		require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT
				percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM (d.event_payload->>'started_at')::timestamptz - p.created_at)),
				percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM (d.event_payload->>'started_at')::timestamptz - p.created_at)),
				percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM d.created_at - p.created_at)),
				percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM d.created_at - p.created_at))
			FROM outbox_dispatched d JOIN operations p ON p.id = (d.event_payload->>'operation_id')::uuid
			WHERE d.event_type = 'operation.status_changed' AND d.event_payload->>'status' = 'succeeded'
			  AND p.created_at >= $1 AND p.created_at < $1 + interval '1 minute'`, m).Scan(&p50, &p99, &f50, &f99))
		return p50, p99, f50, f99
	}

	// Under the sample size: exact, and said to be.
	r := read(small)
	require.Equal(t, []int64{800, 800, 800, 40}, []int64{r.accepted, r.succeeded, r.delivered, r.redelivered})
	require.Nil(t, r.latencySample, "every operation's latency read")
	require.Nil(t, r.redeliveredSample, "every request event looked at")
	p50, p99, f50, f99 := exact(small)
	require.InDeltaSlice(t, []float64{p50, p99, f50, f99}, []float64{r.startP50, r.startP99, r.finishP50, r.finishP99}, 1e-4)

	// Above it: counts exact, latencies and redeliveries from 1,000, said to be, and close.
	for _, x := range []struct {
		m              time.Time
		n, redelivered int64
	}{{large, 2000, 1000}, {larger, 20000, 10000}} {
		r := read(x.m)
		require.Equal(t, []int64{x.n, x.n, x.n}, []int64{r.accepted, r.succeeded, r.delivered})
		require.Equal(t, int64(1000), *r.latencySample)
		require.Equal(t, int64(1000), *r.redeliveredSample)
		// Half the request events are redeliveries: among 1,000 drawn, 500 ± 16 (one standard
		// deviation); 15 % is more than six.
		require.InEpsilon(t, float64(x.redelivered), float64(r.redelivered), 0.15)
		p50, p99, f50, f99 := exact(x.m)
		require.InDelta(t, p50, r.startP50, 0.1, "start p50 (0 to 0.98 s, uniform)")
		require.InDelta(t, p99, r.startP99, 0.03, "start p99")
		require.InDelta(t, f50, r.finishP50, 0.3, "finish p50 (0.01 to 2.98 s, uniform)")
		require.InDelta(t, f99, r.finishP99, 0.1, "finish p99")
	}

	// The reads beyond the log's minute, counted by PostgreSQL in the operator's own
	// transaction: at most 1,000 primary-key reads of operations and 1,000 probes of the
	// log's aggregate index per minute, at 2,000 and at 20,000 operations alike.
	reads := func(m time.Time) (pk, probes, indexes int64) {
		tx, err := b.db.OperatorPool(t).Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT * FROM operator_overview_minute($1, $2, $3, '{material_transfer.requested}', 1000)`,
			m, m.Add(time.Minute), m.Add(time.Minute+10*time.Second))
		require.NoError(t, err)
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_numscans('operations_pkey'::regclass),
				sum(pg_stat_get_xact_numscans(i.indexrelid))::bigint, count(*)
			FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE c.relname LIKE 'outbox_dispatched%aggregate_id%' AND c.relkind = 'i'`).Scan(&pk, &probes, &indexes))
		return pk, probes, indexes
	}
	pk1, probes1, indexes := reads(large)
	pk10, probes10, _ := reads(larger)
	t.Logf("primary-key reads of operations %d and %d, probes of the log's %d day partitions %d and %d, at 2,000 and 20,000 operations",
		pk1, pk10, indexes, probes1, probes10)
	require.Equal(t, []int64{1000, 1000}, []int64{pk1, pk10}, "one primary-key read per sampled operation")
	require.LessOrEqual(t, probes1, 1000*indexes, "at most one probe per sampled request event and day partition")
	require.LessOrEqual(t, probes10, 1000*indexes, "at most one probe per sampled request event and day partition")
}

// The overview lists the workspaces with the most tasks waiting, the most first, each flow
// with its waiting tasks, the requests of those that fair share holds in the outbox, the
// oldest waiting task's age and its running tasks; the flows' row counts the held requests
// of every workspace; the stores' rate-limit waits the workers logged in Redis show per
// platform, this minute and over the last hour, every configured platform even at 0.
func TestOverviewBacklogs(t *testing.T) {
	// The page's clock stays at now: the waits logged at now are this minute's.
	now := time.Now()
	b := setupPagesWith(t, func(c *console.Config) {
		c.Now = func() time.Time { return now }
		c.Flows, c.Queues = overviewFlows, []string{"material-transfer"}
		c.RateWaits = ratelimit.WaitLog{Client: c.BullMQ.Client, Prefix: c.BullMQ.Prefix + ":rate:"}
		c.Platforms = []string{"etsy", "sandbox"}
	})
	ctx := context.Background()
	named := func(name string) uuid.UUID {
		ws := uuid.New()
		_, err := b.db.Owner.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, $2)`, ws, name)
		require.NoError(t, err)
		return ws
	}
	// held adds a held request of a pending material transfer of ws (its newest task).
	held := func(ws uuid.UUID) {
		t.Helper()
		_, err := b.db.Owner.Exec(ctx, `INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type,
				aggregate_id, event_payload, status, held_task)
			SELECT gen_random_uuid(), $1, 'material_transfer.requested', 'material-transfer', 'material_transfer', t.id::text,
				jsonb_build_object('transfer_id', t.id), 'held', t.id
			FROM material_transfers t WHERE t.workspace_id = $1 AND t.status = 'pending'
			  AND NOT EXISTS (SELECT 1 FROM outbox_events o WHERE o.held_task = t.id)
			ORDER BY t.updated_at DESC LIMIT 1`, ws)
		require.NoError(t, err)
	}
	bulk, small, idle := named("Bulk import"), named("Small shop"), named("Idle")
	for range 5 {
		transfer(t, b, bulk, "pending", "", 0, time.Hour)
	}
	transfer(t, b, bulk, "running", "", 1, time.Minute)
	for range 3 {
		held(bulk)
	}
	transfer(t, b, small, "pending", "", 0, 2*time.Minute)
	transfer(t, b, idle, "succeeded", "", 1, time.Minute)
	log := ratelimit.WaitLog{Client: b.rdb, Prefix: b.bcfg.Prefix + ":rate:"}
	for range 4 {
		require.NoError(t, log.Add(ctx, "sandbox", now))
	}
	require.NoError(t, log.Add(ctx, "sandbox", now.Add(-30*time.Minute)))
	require.NoError(t, log.Add(ctx, "sandbox", now.Add(-2*time.Hour)), "out of the hour")
	require.NoError(t, log.Add(ctx, "amazon", now.Add(-10*time.Minute)))

	code, body := b.c.get("/")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `<th scope="row"><a href="/\?flow=material_transfer">material_transfer</a></th><td>6</td><td>3</td><td>(5\dm\d+s|1h0m\d+s)</td><td>1</td>`, body,
		"six waiting, three of them held")
	rows := regexp.MustCompile(`<tbody id="backlog-([0-9a-f-]+)"><tr><th scope="row"><a href="/workspaces/[0-9a-f-]+">([^<]+)</a></th>`+
		`<td>([a-z_]+)</td><td>(\d+)</td><td>(\d+)</td><td>([^<]+)</td><td>(\d+)</td></tr>`).FindAllStringSubmatch(body, -1)
	require.Len(t, rows, 2, "the workspaces with unfinished tasks, one flow each: %s", body)
	require.Equal(t, []string{bulk.String(), "Bulk import", "material_transfer", "5", "3"}, rows[0][1:6], "the largest first")
	require.Regexp(t, `^(5\dm\d+s|1h0m\d+s)$`, rows[0][6], "the oldest waiting task's age")
	require.Equal(t, "1", rows[0][7])
	require.Equal(t, []string{small.String(), "Small shop", "material_transfer", "1", "0"}, rows[1][1:6])
	require.Regexp(t, `^(1m\d+s|2m\d+s)$`, rows[1][6])
	require.NotContains(t, body, idle.String(), "a workspace with nothing unfinished is not a backlog")
	waits := regexp.MustCompile(`<tr><th scope="row">([a-z]+)</th><td>(\d+)</td><td>(\d+)</td></tr>`).FindAllStringSubmatch(body, -1)
	require.Equal(t, [][]string{{"amazon", "0", "1"}, {"etsy", "0", "0"}, {"sandbox", "4", "5"}},
		[][]string{waits[0][1:], waits[1][1:], waits[2][1:]}, "waits per platform: this minute, the last hour")
}
