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
	require.Regexp(t, `<th scope="row"><a href="/\?flow=material_transfer">material_transfer</a></th><td>6</td><td>3</td><td>(59m5\ds|1h0\ds)</td><td>1</td>`, body,
		"six waiting, three of them held")
	rows := regexp.MustCompile(`<tbody id="backlog-([0-9a-f-]+)"><tr><th scope="row"><a href="/workspaces/[0-9a-f-]+">([^<]+)</a></th>`+
		`<td>([a-z_]+)</td><td>(\d+)</td><td>(\d+)</td><td>([^<]+)</td><td>(\d+)</td></tr>`).FindAllStringSubmatch(body, -1)
	require.Len(t, rows, 2, "the workspaces with unfinished tasks, one flow each: %s", body)
	require.Equal(t, []string{bulk.String(), "Bulk import", "material_transfer", "5", "3"}, rows[0][1:6], "the largest first")
	require.Regexp(t, `^(59m5\ds|1h0\ds)$`, rows[0][6], "the oldest waiting task's age")
	require.Equal(t, "1", rows[0][7])
	require.Equal(t, []string{small.String(), "Small shop", "material_transfer", "1", "0"}, rows[1][1:6])
	require.Regexp(t, `^(1m5\ds|2m\d+s)$`, rows[1][6])
	require.NotContains(t, body, idle.String(), "a workspace with nothing unfinished is not a backlog")
	waits := regexp.MustCompile(`<tr><th scope="row">([a-z]+)</th><td>(\d+)</td><td>(\d+)</td></tr>`).FindAllStringSubmatch(body, -1)
	require.Equal(t, [][]string{{"amazon", "0", "1"}, {"etsy", "0", "0"}, {"sandbox", "4", "5"}},
		[][]string{waits[0][1:], waits[1][1:], waits[2][1:]}, "waits per platform: this minute, the last hour")
}
