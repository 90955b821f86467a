package outbox

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// TestLowWaterHeldSnapshotSpacesFullScans: while the oldest snapshot of the database stays
// held, a workspace's full scans (each walks every entry dispatched since the snapshot) come
// at most FullClaimInterval plus half the snapshot's age apart, and so are few: about log2
// of the hold's length in periods instead of one a period. When no snapshot is held, or it
// moves, one a period; after the hold, the next within a period.
func TestLowWaterHeldSnapshotSpacesFullScans(t *testing.T) {
	const every = 30 * time.Second
	start := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	ws := uuid.New()
	// run claims ws every second from start for d, the oldest snapshot held from start when
	// held (else a new one every second), and returns the times of its full scans.
	run := func(l *lowWater, clock *time.Time, d time.Duration, held bool) (fulls []time.Time) {
		for end := clock.Add(d); clock.Before(end); *clock = clock.Add(time.Second) {
			xmin := uint32(1000)
			if !held {
				xmin = uint32(clock.Unix())
			}
			l.observeHorizon(xmin, true, *clock)
			c := l.begin([]uuid.UUID{ws})
			if c.at[0].IsZero() {
				fulls = append(fulls, *clock)
			}
			l.advance(c, []uuid.UUID{ws}, *clock, []claimed{{WorkspaceID: ws, DueAt: clock.Add(-time.Second)}})
		}
		return fulls
	}
	newL := func() (*lowWater, *time.Time) {
		clock := start
		l := newLowWater(every)
		l.now = func() time.Time { return clock }
		return l, &clock
	}

	l, clock := newL()
	moving := run(l, clock, 20*time.Minute, false)
	require.InDelta(t, 40, len(moving), 1, "no snapshot held: a full scan a period")

	l, clock = newL()
	held := run(l, clock, 20*time.Minute, true)
	for i := 1; i < len(held); i++ {
		gap, age := held[i].Sub(held[i-1]), held[i].Sub(start)
		require.LessOrEqual(t, gap, every+age/2+time.Second, "full scan %d: at most FullClaimInterval plus half the hold's age after the previous one", i)
	}
	require.GreaterOrEqual(t, held[len(held)-1], start.Add(20*time.Minute).Add(-every-10*time.Minute-time.Second),
		"the last full scan of the hold within FullClaimInterval plus half its age of its end")
	require.Less(t, len(held), 12, "held 20 minutes: the full scans come at ages a, 2a, 4a... (%d: %v)", len(held), held)
	t.Logf("20 minutes held: %d full scans (%d without a hold)", len(held), len(moving))

	// The hold ends: the next full scan within a period.
	l.observeHorizon(0, false, *clock)
	after := run(l, clock, every+time.Second, false)
	require.NotEmpty(t, after, "a full scan within a period of the hold's end")
}

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

// TestLateEventUnderHeldSnapshot: an event whose writer transaction commits after the
// claims' marks passed its due time, while an older snapshot is held, is still delivered,
// within FullClaimInterval plus half the held snapshot's age (plus the dispatcher's
// observation period of the snapshot); and the full scans under the hold are spaced out:
// fewer than one in two periods.
func TestLateEventUnderHeldSnapshot(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	ws := createWorkspace(t, db)
	other := createWorkspace(t, db)
	held, err := db.Owner.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `SELECT count(*) FROM workspaces`)
	require.NoError(t, err)
	heldAt := time.Now()

	cfg := fastConfig()
	cfg.FullClaimInterval = 200 * time.Millisecond
	rec := &recorder{}
	d, _ := startDispatcher(t, db, cfg, PublisherMap{testQueue: rec})
	d.low.mu.Lock()
	fullsAtStart := d.low.fulls
	d.low.mu.Unlock()

	// The late writer: its event is due at its transaction's start, and it commits after
	// lowWaterMargin, the claims of ws having moved the mark past that due time.
	late, err := db.Owner.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = late.Rollback(ctx) }()
	lateID := uuid.Must(uuid.NewV7())
	_, err = late.Exec(ctx, `INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload)
		VALUES ($1, $2, 'test.happened', $3, 'thing', 'late', '{"thing_id": "late", "version": 0}')`, lateID, ws, testQueue)
	require.NoError(t, err)
	var steady []uuid.UUID
	for end := time.Now().Add(lowWaterMargin + 2*time.Second); time.Now().Before(end); {
		steady = append(steady, publishEvents(t, db, ws, 1)...)
		steady = append(steady, publishEvents(t, db, other, 1)...)
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, late.Commit(ctx))
	committed := time.Now()

	delivered := func() bool { return slices.Contains(rec.ids(), lateID.String()) }
	waitFor(t, 60*time.Second, "the late event delivered", delivered)
	took, age := time.Since(committed), time.Since(heldAt)
	bound := cfg.FullClaimInterval + age/2 + horizonInterval + time.Second // + the machine's slack
	t.Logf("late event delivered %s after its commit, the snapshot held %s (bound %s)", took, age, bound)
	require.LessOrEqual(t, took, bound, "delivered within FullClaimInterval plus half the held snapshot's age")
	waitFor(t, 30*time.Second, "the steady events delivered", func() bool { return rec.count() >= len(steady)+1 })

	d.low.mu.Lock()
	fulls := d.low.fulls - fullsAtStart
	d.low.mu.Unlock()
	periods := int64(2 * age / cfg.FullClaimInterval) // two workspaces
	t.Logf("%d full scans of the two workspaces over %d of their periods under the hold", fulls, periods)
	require.Less(t, 2*fulls, periods, "under the hold, fewer than one full scan in two periods")
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
