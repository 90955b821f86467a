package outbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestClaimUnderHeldSnapshot: while a REPEATABLE READ transaction holds a snapshot, no dead
// row version of outbox_events can be pruned, and every dispatched event leaves a dead
// entry in outbox_events_due. The claim with low-water marks starts its scans past them and
// stays at its level; the claim without (FullClaimInterval < 0, the earlier claim) walks
// them all and slows down with the events dispatched since the snapshot. Both run in the
// same test, on the same load: the times (logged, not asserted: the machine's load moves
// them) are ratios of each one's own level before the hold. The buffers the claim's index scan reads (EXPLAIN of the scan, with the workspace's
// mark) are the load-independent measure. Measured (load 15-20, 250 rounds): the claim
// statement of 10 workspaces read 9,859 buffers in 52 ms without marks, 1,667 in 4.8 ms with.
func TestClaimUnderHeldSnapshot(t *testing.T) {
	const (
		workspaces = 10
		perRound   = 20 // events per workspace per round
		before     = 20 // rounds before the hold
		during     = 120
	)
	run := func(t *testing.T, marks bool) (levelBefore, levelEnd time.Duration, bufBefore, bufEnd int64) {
		db := pgtest.New(t)
		ctx := context.Background()
		rows, err := db.Owner.Query(ctx, `INSERT INTO workspaces (id, name) SELECT gen_random_uuid(), 'ws' FROM generate_series(1, $1) RETURNING id`, workspaces)
		require.NoError(t, err)
		wss, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		cfg := fastConfig()
		if !marks {
			cfg.FullClaimInterval = -1
		}
		rec := &recorder{}
		d, err := NewDispatcher(cfg, db.App, PublisherMap{testQueue: rec}, testLogger(t), nil)
		require.NoError(t, err)
		d.low.margin = 0 // the test's writers commit before the claims; no late commit to allow for
		round := func(i int) time.Duration {
			bulkInsert(t, db, wss, perRound)
			token := "t/" + uuid.NewString()
			start := time.Now()
			got, err := d.claim(ctx, wss, token, 500)
			took := time.Since(start)
			require.NoError(t, err)
			// every due event (and the one buffers below added)
			require.GreaterOrEqual(t, len(got), workspaces*perRound, "round %d claims every due event", i)
			d.deliver(ctx, token, got, start)
			return took
		}
		// buffers reads the shared buffers of the claim's index scan for one workspace, as the
		// claim scans it (the workspace's low-water mark, or none), in a rolled-back transaction.
		buffers := func() int64 {
			bulkInsert(t, db, wss[:1], 1)
			marks := d.low.begin(wss[:1]).at
			tx, err := db.Owner.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			var plan []byte
			require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
				SELECT id FROM outbox_events WHERE workspace_id = $1 AND status = 'pending' AND next_attempt_at >= $2 AND next_attempt_at <= now()
				  AND (locked_until IS NULL OR locked_until <= now())
				ORDER BY next_attempt_at LIMIT 500 FOR UPDATE SKIP LOCKED`, wss[0], marks[0]).Scan(&plan))
			var n int64
			require.NoError(t, tx.QueryRow(ctx, `SELECT (($1::jsonb)->0->'Plan'->>'Shared Hit Blocks')::bigint + (($1::jsonb)->0->'Plan'->>'Shared Read Blocks')::bigint`, plan).Scan(&n))
			return n
		}
		median := func(ds []time.Duration) time.Duration {
			ds = slices.Clone(ds)
			slices.Sort(ds)
			return ds[len(ds)/2]
		}
		var times []time.Duration
		for i := range before {
			times = append(times, round(i))
		}
		_, err = db.Owner.Exec(ctx, `VACUUM outbox_events`)
		require.NoError(t, err)
		for i := range before {
			times = append(times, round(before+i))
		}
		levelBefore = median(times[before:])
		bufBefore = buffers()

		held, err := db.Owner.Begin(ctx) // the held snapshot
		require.NoError(t, err)
		defer func() { _ = held.Rollback(ctx) }()
		_, err = held.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
		require.NoError(t, err)
		_, err = held.Exec(ctx, `SELECT count(*) FROM workspaces`)
		require.NoError(t, err)
		times = times[:0]
		for i := range during {
			times = append(times, round(i))
		}
		levelEnd = median(times[len(times)-20:])
		bufEnd = buffers()
		return levelBefore, levelEnd, bufBefore, bufEnd
	}
	var bufs [2][2]int64
	for i, marks := range []bool{false, true} {
		b, e, bb, be := run(t, marks)
		bufs[i] = [2]int64{bb, be}
		t.Logf("marks=%v: claim of %d workspaces, median of 20 rounds: %.2f ms before the hold, %.2f ms after %d events dispatched under it (%.1fx); "+
			"one workspace's scan reads %d buffers before, %d after", marks, workspaces, ms(b), ms(e), during*perRound*workspaces, float64(e)/float64(b), bb, be)
	}
	// Load-independent: the scan without marks reads a buffer per few dead entries (2,400 of
	// them in the workspace); the scan with marks reads those of the last round only.
	require.Greater(t, bufs[0][1], 5*bufs[0][0], "without marks the scan walks the dead entries (the test's control)")
	require.Less(t, 4*bufs[1][1], bufs[0][1], "with marks the scan does not walk the dead entries")
}

// TestLowWaterPeriods: a workspace's mark is used only by claims that begin in the period
// of that workspace in which it was derived, so each workspace's first claim of a period
// starts at its first entry; the periods are shifted per workspace, so that those full
// scans spread over the period instead of all falling on one claim.
func TestLowWaterPeriods(t *testing.T) {
	const every = 30 * time.Second
	clock := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	l := newLowWater(every)
	l.now = func() time.Time { return clock }

	ws := uuid.New()
	// Move the clock to 1 s before ws's period ends.
	p := l.period(ws, clock)
	for l.period(ws, clock.Add(time.Second)) == p {
		clock = clock.Add(time.Second)
	}
	due := clock.Add(-time.Minute)
	c := l.begin([]uuid.UUID{ws})
	require.True(t, c.at[0].IsZero(), "no mark yet: the claim starts at the first entry")
	l.advance(c, []uuid.UUID{ws}, clock, []claimed{{WorkspaceID: ws, DueAt: due}})
	require.Equal(t, due, l.begin([]uuid.UUID{ws}).at[0], "same period: the mark is used")

	// A claim that began in this period and advances after it ended stores a mark of this
	// period: the next period's first claim still starts at the first entry.
	c = l.begin([]uuid.UUID{ws})
	clock = clock.Add(time.Second)
	l.advance(c, []uuid.UUID{ws}, clock, []claimed{{WorkspaceID: ws, DueAt: due}})
	c = l.begin([]uuid.UUID{ws})
	require.True(t, c.at[0].IsZero(), "a new period: the first claim starts at the first entry")
	l.advance(c, []uuid.UUID{ws}, clock, []claimed{{WorkspaceID: ws, DueAt: due}})
	require.Equal(t, due, l.begin([]uuid.UUID{ws}).at[0])

	// forget drops every mark, and a claim that began before it stores none.
	c = l.begin([]uuid.UUID{ws})
	l.forget()
	l.advance(c, []uuid.UUID{ws}, clock, []claimed{{WorkspaceID: ws, DueAt: due}})
	require.True(t, l.begin([]uuid.UUID{ws}).at[0].IsZero())

	// Spread: of 1,000 workspaces, the share whose period ends within the next tenth of a
	// period is about a tenth (all or none if the periods were not shifted).
	ends := 0
	for range 1000 {
		w := uuid.New()
		if l.period(w, clock) != l.period(w, clock.Add(every/10)) {
			ends++
		}
	}
	require.InDelta(t, 100, ends, 50, "workspaces whose period ends in the next tenth of it")

	// Negative interval: no marks at all.
	off := newLowWater(-1)
	c = off.begin([]uuid.UUID{ws})
	off.advance(c, []uuid.UUID{ws}, clock, []claimed{{WorkspaceID: ws, DueAt: due}})
	require.True(t, off.begin([]uuid.UUID{ws}).at[0].IsZero())
}

// TestMarkFindsRowsByPrimaryKey: the statements that find claimed rows by id (mark
// dispatched, mark failed, release), planned as the dispatcher plans them (generic plans,
// app_user scoped to the workspace), read the primary key, whatever the statistics say: on
// a table grown by an earlier hold and vacuumed since, with a snapshot held and 20,000 dead
// entries, marking 10 events reads fewer than 300 buffers (about 25), not the heap or the due
// index with the dead row versions and entries.
func TestMarkFindsRowsByPrimaryKey(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	ws := createWorkspace(t, db)
	// A table that held many more rows than it holds now (after a held snapshot): heap and
	// indexes grown, statistics of a few rows.
	dispatchNow(t, db, bulkInsert(t, db, []uuid.UUID{ws}, 20000)...)
	live := bulkInsert(t, db, []uuid.UUID{ws}, 20)
	_, err := db.Owner.Exec(ctx, `VACUUM ANALYZE outbox_events`)
	require.NoError(t, err)
	held, err := db.Owner.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `SELECT count(*) FROM workspaces`)
	require.NoError(t, err)
	dispatchNow(t, db, bulkInsert(t, db, []uuid.UUID{ws}, 20000)...)

	var ids strings.Builder
	ids.WriteString("'{")
	for i, id := range live[:10] {
		if i > 0 {
			ids.WriteByte(',')
		}
		ids.WriteString(id.String())
	}
	ids.WriteString("}'")
	for _, s := range []struct{ name, types, sql, args string }{
		{"mark dispatched", "uuid[], text", markDispatchedSQL, ids.String() + ", 'token'"},
		{"mark failed", "uuid[], float8[], text[], int, text", markFailedSQL, ids.String() + ", '{1,1,1,1,1,1,1,1,1,1}', '{e,e,e,e,e,e,e,e,e,e}', 20, 'token'"},
		{"release", "uuid[], text", releaseSQL, ids.String() + ", 'token'"},
	} {
		var plan string
		var n int64
		func() {
			tx, err := db.App.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, scopeSQL, ws.String(), "")
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `PREPARE p (`+s.types+`) AS `+s.sql)
			require.NoError(t, err)
			defer func() { _, _ = tx.Exec(ctx, `DEALLOCATE p`) }()
			require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE p (`+s.args+`)`).Scan(&plan))
			require.NoError(t, tx.QueryRow(ctx, `SELECT (($1::jsonb)->0->'Plan'->>'Shared Hit Blocks')::bigint + (($1::jsonb)->0->'Plan'->>'Shared Read Blocks')::bigint`, plan).Scan(&n))
		}()
		t.Logf("%s: %d buffers", s.name, n)
		require.Contains(t, plan, "outbox_events_pkey", "%s: by primary key", s.name)
		require.Less(t, n, int64(300), "%s: a few buffers, not the dead entries'", s.name)
	}
}

// TestClaimFindsRowsByPrimaryKey: the claim statement, planned as the dispatcher plans it
// (a generic plan on one connection, app_user scoped to the round's workspaces, fair share
// on), reads a bounded number of buffers when it starts at the workspace's low-water mark,
// whatever the dead row versions a held snapshot keeps: its updates (the lease, the expired
// lease's dead letter, the fair share's hold) find their rows by primary key. Replanned after
// a vacuum under the hold (statistics of a few live rows in grown pages), an update joined
// with the claimed rows walked the whole primary key, a heap visit per dead entry. Here, with
// 20,000 dead entries and 20 due events (one an expired lease at its last attempt), the claim
// reads about 140 buffers (the join: about 20,000).
func TestClaimFindsRowsByPrimaryKey(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	ws, other := createWorkspace(t, db), createWorkspace(t, db)

	// One connection, as the dispatcher's: the statement is prepared and its generic plan
	// made while the table is small.
	conn, err := db.App.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	claim := func(sql string, mark time.Time) string {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		one, list := scopeOf([]uuid.UUID{ws, other})
		_, err = tx.Exec(ctx, scopeSQL, one, list)
		require.NoError(t, err)
		args := fmt.Sprintf(`'{%s,%s}', 500, 'token', 30000, 20, '{"%s","%[3]s"}', '{%s}', '{thing_id}', 1, '', '{}', '{}', 1`,
			ws, other, mark.UTC().Format(time.RFC3339Nano), testQueue)
		var plan string
		require.NoError(t, tx.QueryRow(ctx, sql+` (`+args+`)`).Scan(&plan))
		return plan
	}
	_, err = conn.Exec(ctx, `PREPARE p (uuid[], int, text, bigint, int, timestamptz[], text[], text[], int, text, uuid[], text[], int) AS `+claimSQL)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), `DEALLOCATE p`) })
	claim(`EXPLAIN (FORMAT JSON) EXECUTE p`, time.Time{})

	held, err := db.Owner.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Rollback(context.Background()) })
	_, err = held.Exec(ctx, `SELECT count(*) FROM workspaces`)
	require.NoError(t, err)
	dispatchNow(t, db, allIDsOf(t, db, ws)...)
	dispatchNow(t, db, bulkInsert(t, db, []uuid.UUID{ws}, 20000)...)
	// Vacuum (autovacuum after 1,000 dead rows) removes nothing under the hold; its new
	// statistics (a few live rows, the grown pages and index entries) replan the statement.
	_, err = db.Owner.Exec(ctx, `VACUUM outbox_events`)
	require.NoError(t, err)
	// The claim starts a second before the mark: the dead entries must be due before that,
	// however fast this machine inserted and dispatched them.
	time.Sleep(1500 * time.Millisecond)
	var mark time.Time
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT now()`).Scan(&mark))
	live := bulkInsert(t, db, []uuid.UUID{ws}, 20)
	_, err = db.Owner.Exec(ctx, `UPDATE outbox_events SET locked_by = 'gone', locked_until = now() - interval '1 minute', attempt_count = 19
		WHERE id = $1`, live[0])
	require.NoError(t, err)

	plan := claim(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE p`, mark.Add(-time.Second))
	var n, got int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT (($1::jsonb)->0->'Plan'->>'Shared Hit Blocks')::bigint + (($1::jsonb)->0->'Plan'->>'Shared Read Blocks')::bigint,
		(($1::jsonb)->0->'Plan'->>'Actual Rows')::bigint`, plan).Scan(&n, &got))
	t.Logf("claim of 20 due events past 20,000 dead entries: %d buffers", n)
	require.Equal(t, int64(19), got, "the due events are claimed, the expired lease at its last attempt is not")
	require.Less(t, n, int64(500), "a few buffers per claimed event, not one per dead entry")
}

// TestDiscoveryMark: discovery looks at the events due since its previous run (less the
// margin), at all of them once per FullClaimInterval, after any forget of the claim's marks
// and after a failure, and keeps its mark when its result was cut at DiscoveryLimit.
func TestDiscoveryMark(t *testing.T) {
	const every = 30 * time.Second
	l := newLowWater(every)
	m := discoveryMark{every: every}
	clock := time.Date(2026, 12, 6, 21, 0, 0, 0, time.UTC)
	since, seq := m.since(l, clock)
	require.True(t, since.IsZero(), "the first discovery is full")
	m.advance(since, seq, clock, false)

	clock = clock.Add(time.Second)
	since, seq = m.since(l, clock)
	require.Equal(t, clock.Add(-time.Second-lowWaterMargin), since, "the previous discovery's now, less the margin")
	m.advance(since, seq, clock, true)
	again, seq := m.since(l, clock.Add(time.Second))
	require.Equal(t, since, again, "a result cut at the limit keeps the mark")
	m.advance(again, seq, clock.Add(time.Second), false)

	since, _ = m.since(l, clock.Add(2*time.Second))
	require.False(t, since.IsZero())
	l.forget()
	since, seq = m.since(l, clock.Add(2*time.Second))
	require.True(t, since.IsZero(), "after a forget of the claim's marks, the next discovery is full")
	m.advance(since, seq, clock.Add(2*time.Second), false)

	since, _ = m.since(l, clock.Add(3*time.Second))
	require.False(t, since.IsZero())
	m.reset()
	since, seq = m.since(l, clock.Add(3*time.Second))
	require.True(t, since.IsZero(), "after a failed discovery, the next is full")
	m.advance(since, seq, clock.Add(3*time.Second), false)

	since, _ = m.since(l, clock.Add(3*time.Second+every-time.Millisecond))
	require.False(t, since.IsZero())
	since, _ = m.since(l, clock.Add(3*time.Second+every))
	require.True(t, since.IsZero(), "a full discovery at least once per FullClaimInterval")

	off := discoveryMark{every: -1}
	since, seq = off.since(l, clock)
	off.advance(since, seq, clock, false)
	since, _ = off.since(l, clock.Add(time.Second))
	require.True(t, since.IsZero(), "FullClaimInterval < 0: every discovery is full")
}
