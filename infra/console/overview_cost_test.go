package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestOverviewRoundCost measures a sampler round's reads (not a check: it runs only with
// OVERVIEW_COST=1; docs/operations.md, "The overview and what it costs"): a database holding
// a log of 2 minutes 10 seconds at OVERVIEW_COST_RATE finished operations a minute (100,000
// when unset; each a request event and a pending and a succeeded operation.status_changed,
// 0.1 % of the request events redeliveries) after a million earlier events, analyzed, read
// as the sampler reads its minute once it runs in step (the BRIN ranges written since the
// round before left unsummarized): at sql/058 (operator_overview_log and
// operator_overview_deliveries) and at sql/064 (operator_overview_minute), each statement as
// listing_operator, OVERVIEW_COST_RUNS runs (7 when unset) per series, two series each.
func TestOverviewRoundCost(t *testing.T) {
	if os.Getenv("OVERVIEW_COST") == "" {
		t.Skip("a measurement: OVERVIEW_COST=1 runs it")
	}
	rate, runs := envInt(t, "OVERVIEW_COST_RATE", 100000), envInt(t, "OVERVIEW_COST_RUNS", 7)
	ctx := context.Background()
	mig := pgtest.MigrateTo(t, 58)
	conn := mig.Conn(t)
	run := func(q string, args ...any) {
		t.Helper()
		_, err := conn.Exec(ctx, q, args...)
		require.NoError(t, err, q)
	}
	ws := uuid.New()
	run(`INSERT INTO workspaces (id, name) VALUES ($1, 'ws')`, ws)
	// Two hours before today (UTC): the log in its default partition (the day partitions are
	// today's and those ahead).
	m := time.Now().UTC().Truncate(24 * time.Hour).Add(-2 * time.Hour)
	start := time.Now()
	// A million earlier events (the minute is a small part of its partition, as in a day).
	run(`INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
			metadata, attempt_count, created_at, dispatched_at)
		SELECT gen_random_uuid(), $1, 'product.synced', 'stream', 'product', i::text, '{"id":1}', '{}', 1, at, at
		FROM (SELECT i, $2::timestamptz - interval '30 minutes' + i * interval '1 millisecond' AS at
		      FROM generate_series(1, 1000000) i) x`, ws, m)
	// Ten-second slices from a minute before m to ten seconds after its end, in delivery order.
	per := rate / 6
	for s := -6; s < 7; s++ {
		run(`
			WITH o AS MATERIALIZED (
			  SELECT gen_random_uuid() AS id, gen_random_uuid() AS task, i, $2::timestamptz + (i * 10.0 / $3) * interval '1 second' AS t
			  FROM generate_series(0, $3 - 1) i
			), ops AS (
			  INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id, version, created_at, updated_at)
			  SELECT id, $1, 'store_verification', 'succeeded', 'store', gen_random_uuid(), 3, t, t FROM o
			)
			INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload,
			                               metadata, attempt_count, created_at, dispatched_at)
			SELECT gen_random_uuid(), $1, typ, dest, agg, agg_id, payload, '{"request_id":"r"}', 1, at, at + interval '5 ms'
			FROM (
			  SELECT 'operation.status_changed' AS typ, 'stream' AS dest, 'operation' AS agg, id::text AS agg_id,
			         jsonb_build_object('operation_id', id, 'type', 'store_verification', 'status', 'pending', 'version', 1) AS payload, t AS at FROM o
			  UNION ALL
			  SELECT 'operation.status_changed', 'stream', 'operation', id::text,
			         jsonb_build_object('operation_id', id, 'type', 'store_verification', 'status', 'succeeded', 'version', 3,
			                            'started_at', t + (i % 50) * interval '20 ms'),
			         t + (i % 100) * interval '30 ms' + interval '10 ms' FROM o
			  UNION ALL
			  SELECT 'store_verification.requested', 'store-verification', 'store_verification', task::text,
			         jsonb_build_object('store_id', task, 'operation_id', id), t FROM o
			  UNION ALL
			  SELECT 'store_verification.requested', 'store-verification', 'store_verification', task::text,
			         jsonb_build_object('store_id', task, 'operation_id', id), t - interval '1 minute' FROM o WHERE i % 1000 = 0
			) e ORDER BY at`, ws, m.Add(time.Duration(s)*10*time.Second), per)
	}
	run(`ANALYZE outbox_dispatched`)
	run(`ANALYZE operations`)
	var rows, minute int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE dispatched_at >= $1 AND dispatched_at < $2)
		FROM outbox_dispatched`, m, m.Add(time.Minute)).Scan(&rows, &minute))
	t.Logf("log: %d rows, %d delivered in the minute; filled in %s", rows, minute, time.Since(start).Round(time.Second))
	var inDefault int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM outbox_dispatched_default`).Scan(&inDefault))
	require.Equal(t, rows, inDefault, "the log in its default partition")

	// unsummarize leaves the BRIN ranges from the one holding the first event delivered ten
	// seconds after the minute began (when the round before ran) unsummarized, as the
	// sampler's summary left them then.
	unsummarize := func() {
		run(`SELECT brin_desummarize_range('outbox_dispatched_default_dispatched_at_idx', b)
			FROM generate_series((SELECT (min(ctid)::text::point)[0]::bigint / 128 * 128 FROM outbox_dispatched_default WHERE dispatched_at >= $1),
			                     pg_relation_size('outbox_dispatched_default') / 8192, 128) b`, m.Add(10*time.Second))
		run(`INSERT INTO overview_log_summary (partition, next_block)
			SELECT 'outbox_dispatched_default', (min(ctid)::text::point)[0]::bigint / 128 * 128 FROM outbox_dispatched_default WHERE dispatched_at >= $1
			ON CONFLICT (partition) DO UPDATE SET next_block = excluded.next_block`, m.Add(10*time.Second))
	}
	run(`SELECT overview_summarize_log()`)
	if hold := os.Getenv("OVERVIEW_COST_HOLD"); hold != "" {
		d, err := time.ParseDuration(hold)
		require.NoError(t, err)
		t.Logf("holding %s for %s (minute %s)", mig.URL, d, m.UTC().Format(time.RFC3339))
		time.Sleep(d)
		return
	}
	requests := []string{"store_verification.requested", "publication.requested", "listing_update.requested",
		"unpublish.requested", "product_sync.requested", "material_transfer.requested", "media.requested", "ai_task.requested"}
	type stmt struct {
		name, sql string
		args      []any
	}
	common := func(reads ...stmt) []stmt {
		return append(append([]stmt{{"overview_summarize_log", `SELECT overview_summarize_log()`, nil},
			{"operator_overview_tasks", `SELECT * FROM operator_overview_tasks($1)`, []any{m.Add(-time.Hour)}}}, reads...),
			stmt{"outbox_stats", `SELECT * FROM outbox_stats($1)`, []any{m.Add(70 * time.Second)}})
	}
	at058 := common(
		stmt{"operator_overview_log", `SELECT * FROM operator_overview_log($1, $2, 1000)`, []any{m, m.Add(time.Minute)}},
		stmt{"operator_overview_deliveries", `SELECT * FROM operator_overview_deliveries($1, $2, $3, 1000)`, []any{m, m.Add(time.Minute), requests}})
	at064 := common(stmt{"operator_overview_minute", `SELECT * FROM operator_overview_minute($1, $2, $3, $4, 1000)`,
		[]any{m, m.Add(time.Minute), m.Add(70 * time.Second), requests}})

	// Measured alone: OVERVIEW_COST_LOCK names a file locked (flock) while the series run, and
	// OVERVIEW_COST_RT a real-time priority given to this process and to the measuring
	// backend (chrt -r) meanwhile.
	if path := os.Getenv("OVERVIEW_COST_LOCK"); path != "" {
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
		require.NoError(t, err)
		t.Logf("waiting for %s", path)
		require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
		t.Cleanup(func() { _ = f.Close() })
	}
	rt := os.Getenv("OVERVIEW_COST_RT")
	if rt != "" {
		require.NoError(t, exec.Command("chrt", "-a", "-r", "-p", rt, fmt.Sprint(os.Getpid())).Run())
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("measuring from %s, load average %s", time.Now().UTC().Format(time.TimeOnly), load)
	t.Cleanup(func() {
		load, _ := os.ReadFile("/proc/loadavg")
		t.Logf("measured until %s, load average %s", time.Now().UTC().Format(time.TimeOnly), load)
	})
	series := func(label string, stmts []stmt) {
		op, err := pgx.Connect(ctx, mig.URL)
		require.NoError(t, err)
		defer func() { _ = op.Close(ctx) }()
		if rt != "" {
			var pid int
			require.NoError(t, op.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			require.NoError(t, exec.Command("chrt", "-r", "-p", rt, fmt.Sprint(pid)).Run())
		}
		_, err = op.Exec(ctx, `SET ROLE listing_operator`)
		require.NoError(t, err)
		took := map[string][]time.Duration{}
		for range runs {
			unsummarize()
			var all time.Duration
			for _, s := range stmts {
				t0 := time.Now()
				_, err := op.Exec(ctx, s.sql, s.args...)
				require.NoError(t, err, s.name)
				d := time.Since(t0)
				took[s.name] = append(took[s.name], d)
				all += d
			}
			took["round"] = append(took["round"], all)
		}
		// One more run, explained: the buffers each statement touched.
		unsummarize()
		var b strings.Builder
		for _, s := range stmts {
			var plan []map[string]any
			require.NoError(t, op.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+s.sql, s.args...).Scan(&plan))
			p := plan[0]["Plan"].(map[string]any)
			hit, _ := p["Shared Hit Blocks"].(float64)
			read, _ := p["Shared Read Blocks"].(float64)
			fmt.Fprintf(&b, " %s %.0f hit %.0f read;", s.name, hit, read)
			if os.Getenv("OVERVIEW_COST_PLAN") != "" {
				_, err = op.Exec(ctx, `RESET ROLE; LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
					SET auto_explain.log_analyze = on; SET auto_explain.log_buffers = on; SET ROLE listing_operator`)
				require.NoError(t, err)
				_, err = op.Exec(ctx, s.sql, s.args...)
				require.NoError(t, err)
				_, err = op.Exec(ctx, `RESET ROLE; SET auto_explain.log_min_duration = -1; SET ROLE listing_operator`)
				require.NoError(t, err)
			}
		}
		names := []string{}
		for _, s := range stmts {
			names = append(names, s.name)
		}
		for _, name := range append(names, "round") {
			d := took[name]
			slices.Sort(d)
			t.Logf("%s %s: median %s, min %s (%s)", label, name, d[len(d)/2].Round(time.Millisecond), d[0].Round(time.Millisecond), d)
		}
		t.Logf("%s buffers:%s", label, b.String())
	}
	series("058", at058)
	mig.UpTo(t, 64)
	series("064", at064)
	mig.DownTo(t, 58)
	series("058", at058)
	mig.UpTo(t, 64)
	series("064", at064)
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var n int
	_, err := fmt.Sscan(v, &n)
	require.NoError(t, err, name)
	return n
}
