package outbox

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestOutboxWALPerEvent measures the outbox's own WAL per event in a short, repeatable run:
// OUTBOX_WAL_N events (default 4000) in 10 workspaces, committed two per transaction
// through the EventPublisher, then dispatched by the dispatcher's claim and mark (rounds of
// every workspace, an in-memory publisher). The records are read with pg_walinspect and
// kept when they touch the test's database (or belong to one of its transactions), as
// bench/walinspect.go does for `make soak`; the totals are printed per phase, by record type
// and by relation, with and without full-page images (those depend on the cluster's
// checkpoints, which other sessions force). A CHECKPOINT is not issued: the figure without
// full-page images is the repeatable one.
//
// Run: OUTBOX_WAL=1 go test -run '^TestOutboxWALPerEvent$' -v ./infra/outbox/
func TestOutboxWALPerEvent(t *testing.T) {
	if os.Getenv("OUTBOX_WAL") == "" {
		t.Skip("set OUTBOX_WAL=1 to measure the outbox's WAL per event")
	}
	n := envInt("OUTBOX_WAL_N", 4000)
	const workspaces = 10
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Owner.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`)
	require.NoError(t, err)
	slot, err := pgx.Connect(ctx, db.OwnerURL) // a temporary slot keeps the WAL until it is read
	require.NoError(t, err)
	t.Cleanup(func() { _ = slot.Close(context.Background()) })
	_, err = slot.Exec(ctx, `SELECT pg_create_physical_replication_slot('outbox_wal_'||substr(md5(random()::text), 1, 8), true, true)`)
	require.NoError(t, err)
	var dbOID string
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT oid::text FROM pg_database WHERE datname = current_database()`).Scan(&dbOID))
	rows, err := db.Owner.Query(ctx, `INSERT INTO workspaces (id, name) SELECT gen_random_uuid(), 'ws' FROM generate_series(1, $1) RETURNING id`, workspaces)
	require.NoError(t, err)
	wss, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	lsn := func() string {
		var s string
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s))
		return s
	}
	type part struct {
		kind, rel string
		len, fpi  int64
	}
	read := func(from, to string) []part {
		rows, err := db.Owner.Query(ctx, `
			WITH r AS (
			  SELECT xid::text::bigint AS x, resource_manager || '/' || split_part(record_type, '+', 1) AS kind,
			         (record_length + 7) / 8 * 8 AS len, fpi_length,
			         (regexp_match(block_ref, 'rel [0-9]+/' || $3 || '/([0-9]+)'))[1] AS rel
			  FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
			), own AS (SELECT DISTINCT x FROM r WHERE rel IS NOT NULL AND x <> 0)
			SELECT kind, coalesce(pg_filenode_relation(0, rel::oid)::text, CASE WHEN rel IS NULL THEN '(commits)' ELSE 'filenode '||rel END),
			       sum(len)::bigint, sum(fpi_length)::bigint
			FROM r WHERE rel IS NOT NULL OR (x <> 0 AND x IN (SELECT x FROM own))
			GROUP BY 1, 2`, from, to, dbOID)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (p part, err error) {
			err = r.Scan(&p.kind, &p.rel, &p.len, &p.fpi)
			return p, err
		})
		require.NoError(t, err)
		return out
	}
	report := func(phase string, parts []part) {
		byKind, byRel := map[string][2]int64{}, map[string][2]int64{}
		var total, fpi int64
		for _, p := range parts {
			// partitions of the log by day: one name
			rel := p.rel
			if strings.HasPrefix(rel, "outbox_dispatched_2") {
				if i := strings.Index(rel[len("outbox_dispatched_2"):], "_"); i >= 0 {
					rel = "outbox_dispatched_<day>" + rel[len("outbox_dispatched_2")+i:]
				} else {
					rel = "outbox_dispatched_<day>"
				}
			}
			k, r := byKind[p.kind], byRel[rel]
			k[0], k[1] = k[0]+p.len, k[1]+p.fpi
			r[0], r[1] = r[0]+p.len, r[1]+p.fpi
			byKind[p.kind], byRel[rel] = k, r
			total += p.len
			fpi += p.fpi
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %.0f B/event (%.0f B without full-page images)\n", phase, float64(total)/float64(n), float64(total-fpi)/float64(n))
		for _, m := range []map[string][2]int64{byKind, byRel} {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return m[keys[i]][0] > m[keys[j]][0] })
			for _, k := range keys {
				if v := m[k]; float64(v[0])/float64(n) >= 0.5 {
					fmt.Fprintf(&b, "  %-44s %7.1f B  (fpi %6.1f B)\n", k, float64(v[0])/float64(n), float64(v[1])/float64(n))
				}
			}
			b.WriteString("  --\n")
		}
		t.Log(b.String())
	}

	// Rounds: the writers commit a chunk of events, two per transaction, then the dispatcher
	// claims (every workspace, at most 50 each), publishes and marks until it is delivered;
	// the live table stays small, as in steady state.
	pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
	require.NoError(t, err)
	rec := &recorder{}
	d, err := NewDispatcher(fastConfig(), db.App, PublisherMap{testQueue: rec}, testLogger(t), nil)
	require.NoError(t, err)
	const chunk = 200
	var p1, p2 []part
	var marks [][3]string
	sizes := ""
	for done := 0; done < n; done += chunk {
		start := lsn()
		for i := 0; i < chunk; i += 2 {
			ws := wss[(i/2)%workspaces]
			evs := make([]domain.Event, 2)
			for j := range evs {
				evs[j] = testHappened{ID: uuid.Must(uuid.NewV7()), ThingID: uuid.NewString(), Version: done + i + j}
			}
			require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
				return pub.Publish(ctx, evs...)
			}))
		}
		inserted := lsn()
		if sizes == "" {
			require.NoError(t, db.Owner.QueryRow(ctx, `SELECT format('row %s B: payload %s, metadata %s (%s)', avg(pg_column_size(o.*))::int,
				avg(pg_column_size(event_payload))::int, avg(pg_column_size(metadata))::int, min(metadata::text)) FROM outbox_events o`).Scan(&sizes))
			t.Log("live rows: " + sizes)
		}
		for rec.count() < done+chunk {
			token := "wal/" + uuid.NewString()
			claimedAt := time.Now()
			got, err := d.claim(ctx, wss, token, 50)
			require.NoError(t, err)
			require.NotEmpty(t, got)
			d.deliver(ctx, token, got, claimedAt)
		}
		dispatched := lsn()
		marks = append(marks, [3]string{start, inserted, dispatched})
	}
	// Asynchronous commits (if any) are flushed by the WAL writer within its delay.
	waitFor(t, 10*time.Second, "the WAL flushed", func() bool {
		var ok bool
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn() > $1::pg_lsn`, marks[len(marks)-1][2]).Scan(&ok))
		return ok
	})
	for _, m := range marks {
		p1 = append(p1, read(m[0], m[1])...)
		p2 = append(p2, read(m[1], m[2])...)
	}
	n = rec.count()
	require.Equal(t, n, statusCounts(t, db)[StatusDispatched])

	report("insert (the writers' transactions)", p1)
	report("dispatch (claim, publish, mark)", p2)
	report("insert + dispatch", append(p1, p2...))
}
