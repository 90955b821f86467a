package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// claimed is one claimed outbox row.
type claimed struct {
	ID          uuid.UUID
	WorkspaceID uuid.UUID
	EventType   string
	Destination string
	// AggregateType and AggregateID are the row's columns (the stored metadata does not
	// repeat them since rowMetadata; older rows may).
	AggregateType string
	AggregateID   string
	Payload       []byte
	Metadata      map[string]string
	CreatedAt     time.Time
	Attempts      int
	// DueAt is the row's next_attempt_at when claimed (the claim's low-water mark, lowWater).
	DueAt time.Time
	// Held: the claim held the row (fair share: no free slot) instead of leasing it.
	Held bool
	// Lane is a held row's lane (held_lane); empty for a leased row.
	Lane string
}

// byWorkspace indexes rows by workspace.
func byWorkspace(rows []claimed) map[uuid.UUID][]int {
	m := map[uuid.UUID][]int{}
	for i, r := range rows {
		m[r.WorkspaceID] = append(m[r.WorkspaceID], i)
	}
	return m
}

// workspacesOf returns the distinct workspaces of rows.
func workspacesOf(rows []claimed) []uuid.UUID {
	seen := make(map[uuid.UUID]struct{}, 8)
	var out []uuid.UUID
	for _, r := range rows {
		if _, ok := seen[r.WorkspaceID]; !ok {
			seen[r.WorkspaceID] = struct{}{}
			out = append(out, r.WorkspaceID)
		}
	}
	return out
}

// idsOf returns the event ids of rows.
func idsOf(rows []claimed) []uuid.UUID {
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

// claimSQL claims, for each workspace of $1, up to $2 due rows (pending, next_attempt_at
// passed, no lease or an expired one), oldest due first, with FOR UPDATE SKIP LOCKED along
// the partial index outbox_events_due, and leases them to token $3 for $4 ms; all the
// workspaces in one statement, in a transaction scoped to them (app.workspace_ids, sql/014).
// The lease is written in columns no index covers (locked_by, locked_until, attempt_count):
// the status stays pending and the update is HOT. A reclaimed expired lease counts as an
// attempt; one that reaches MaxAttempts ($5) goes to dead_letter instead of being claimed
// again (an event whose every delivery ends without an outcome, e.g. one that crashes its
// dispatcher, stops there). Each update (leased, dead, held) finds its rows by primary key
// (id = ANY of an array): joined with e, it was planned, from statistics of a few rows, as a
// walk of the whole primary key (every entry, and under a held snapshot a heap visit for
// each event dispatched since), joined row by row. Each workspace's scan starts at its low-water mark $6 (lowWater: the
// zero time, 0001-01-01, for none), not at its first index entry, so that it does not walk
// the entries of the events dispatched before (dead, and kept while an older snapshot is
// held). It returns each row's due time and the claim's now(), from which the next marks are
// derived.
//
// Fair share (FairShare; none when $7 is empty): a claimed row of a fair-shared queue ($7,
// the task id in its payload's field $8 of the same index) that is not a last look and
// whose task holds no slot yet (outbox_fair_slots) takes a free slot of its workspace's
// queue in its lane (the payload's field $10, empty when absent: the store), 1..$9 per lane
// (1..$13 for a workspace and queue of the pairs $11, $12: a lane alone, FairShare.AloneFactor),
// the lowest first, and no more than that bound less the lane's slots taken (a lane that was
// alone may hold slots numbered above $9 until their tasks end; the numbers looked at are
// 1..the lane's slots taken + its candidates, among which as many as its candidates are free), the oldest rows first; a row that finds none, or loses its slot to a
// concurrent claim (the slot's unique key), is held instead of leased (status held,
// held_task = its task, held_lane = its lane: out of outbox_events_due). Held rows come back
// with held = true and their lane, after the leased ones. The slots of the claimed
// workspaces are read once (taken, one range of the slots' primary key) and looked up in
// memory (hashed NOT IN): a NOT EXISTS per claimed row was planned, from the statistics of
// an empty slots table, as a walk of each workspace's slots per row (500 rows and 200
// slots: 130 ms), and the free slots as a scan of every workspace's slots. A held row's
// task and lane are read from its own payload, as cand read them (a lookup in hold per
// updated row was quadratic: 500 held rows, about 200 ms).
const claimSQL = `
	WITH w AS (SELECT DISTINCT ON (u.ws) u.ws, u.lw FROM unnest($1::uuid[], $6::timestamptz[]) AS u(ws, lw) ORDER BY u.ws, u.lw),
	e AS (
	  SELECT x.* FROM w CROSS JOIN LATERAL (
	    SELECT id, attempt_count, locked_until IS NOT NULL AS expired, workspace_id AS ws, destination AS dest, next_attempt_at AS due,
	           CASE WHEN destination = ANY ($7::text[]) AND NOT event_payload ? 'last_look'
	                THEN event_payload ->> ($8::text[])[array_position($7::text[], destination)] END AS task,
	           coalesce(event_payload ->> $10::text, '') AS lane
	    FROM outbox_events
	    WHERE workspace_id = w.ws AND status = 'pending' AND next_attempt_at >= w.lw AND next_attempt_at <= now()
	      AND (locked_until IS NULL OR locked_until <= now())
	    ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED) x),
	dead AS (
	  UPDATE outbox_events o
	  SET status = 'dead_letter', attempt_count = o.attempt_count + 1, locked_by = NULL, locked_until = NULL,
	      last_error = 'lease expired before any delivery outcome was recorded, ' || (o.attempt_count + 1) || ' attempts'
	  WHERE o.id = ANY (ARRAY(SELECT id FROM e WHERE expired AND attempt_count + 1 >= $5))),
	live AS (SELECT * FROM e WHERE NOT (expired AND attempt_count + 1 >= $5)),
	taken AS (
	  SELECT s.workspace_id AS ws, s.destination AS dest, s.lane, s.slot, s.task_id AS task
	  FROM outbox_fair_slots s WHERE s.workspace_id = ANY ($1::uuid[]) AND cardinality($7::text[]) > 0),
	cand AS (
	  SELECT l.id, l.ws, l.dest, l.lane, l.task::uuid AS task, row_number() OVER (PARTITION BY l.ws, l.dest, l.lane ORDER BY l.due, l.id) AS rn
	  FROM live l
	  WHERE l.task ~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'
	    AND l.task::uuid NOT IN (SELECT t.task FROM taken t)),
	lanes AS (
	  SELECT q.*, q.cap - q.used AS room FROM (
	    SELECT p.*, (SELECT count(*) FROM taken t WHERE t.ws = p.ws AND t.dest = p.dest AND t.lane = p.lane)::int AS used
	    FROM (SELECT c.ws, c.dest, c.lane, count(*)::int AS n,
	                 CASE WHEN (c.ws, c.dest) IN (SELECT a.ws, a.dest FROM unnest($11::uuid[], $12::text[]) AS a(ws, dest))
	                      THEN $13::int ELSE $9::int END AS cap
	          FROM cand c GROUP BY c.ws, c.dest, c.lane) p) q),
	free AS (
	  SELECT p.ws, p.dest, p.lane, g.slot, row_number() OVER (PARTITION BY p.ws, p.dest, p.lane ORDER BY g.slot) AS rn
	  FROM lanes p CROSS JOIN generate_series(1, least(p.cap, p.used + p.n)) AS g(slot)
	  WHERE (p.ws, p.dest, p.lane, g.slot) NOT IN (SELECT t.ws, t.dest, t.lane, t.slot FROM taken t)),
	took AS (
	  INSERT INTO outbox_fair_slots (workspace_id, destination, lane, slot, task_id, event_id)
	  SELECT c.ws, c.dest, c.lane, f.slot, c.task, c.id
	  FROM cand c JOIN free f ON f.ws = c.ws AND f.dest = c.dest AND f.lane = c.lane AND f.rn = c.rn
	  JOIN lanes p ON p.ws = c.ws AND p.dest = c.dest AND p.lane = c.lane AND c.rn <= p.room
	  ON CONFLICT DO NOTHING
	  RETURNING event_id),
	hold AS (SELECT c.id FROM cand c WHERE c.id NOT IN (SELECT event_id FROM took)),
	held AS (
	  UPDATE outbox_events o SET status = 'held', locked_by = NULL, locked_until = NULL,
	         held_task = (o.event_payload ->> ($8::text[])[array_position($7::text[], o.destination)])::uuid,
	         held_lane = coalesce(o.event_payload ->> $10::text, '')
	  WHERE o.id = ANY (ARRAY(SELECT id FROM hold))
	  RETURNING o.id, o.workspace_id, o.event_type, o.destination, o.event_payload, o.metadata, o.created_at, o.attempt_count,
	            o.next_attempt_at, now() AS now, o.aggregate_type, o.aggregate_id, true AS held, o.held_lane AS lane),
	leased AS (
	  UPDATE outbox_events o
	  SET locked_by = $3, locked_until = now() + $4 * interval '1 millisecond',
	      attempt_count = o.attempt_count + CASE WHEN o.id = ANY (ARRAY(SELECT id FROM e WHERE expired)) THEN 1 ELSE 0 END
	  WHERE o.id = ANY (ARRAY(SELECT id FROM live WHERE id NOT IN (SELECT id FROM hold)))
	  RETURNING o.id, o.workspace_id, o.event_type, o.destination, o.event_payload, o.metadata, o.created_at, o.attempt_count,
	            o.next_attempt_at, now() AS now, o.aggregate_type, o.aggregate_id, false AS held, '' AS lane)
	SELECT * FROM leased UNION ALL SELECT * FROM held`

// claim claims up to limit due rows of each of wss under token, in one committed
// transaction, one round trip, each workspace's scan starting at its low-water mark. The
// rows it held instead (fair share: no free slot) come with Held set. On error nothing is
// claimed (the rows stay due).
func (d *Dispatcher) claim(ctx context.Context, wss []uuid.UUID, token string, limit int) ([]claimed, error) {
	var out []claimed
	var now time.Time
	marks := d.low.begin(wss)
	aloneWS, aloneDests := d.aloneOf(wss)
	st := scopedStmt{wss: wss, sql: claimSQL, args: []any{wss, limit, token, d.cfg.Lease.Milliseconds(), d.cfg.MaxAttempts, marks.at,
		d.fair.queues, d.fair.fields, d.fair.slots, d.fair.lane, aloneWS, aloneDests, d.fair.alone},
		read: func(rows pgx.Rows) (err error) {
			out, now, err = collectClaimed(rows)
			return err
		}}
	start := time.Now()
	if err := inWorkspaces(ctx, d.pool, []scopedStmt{st})[0]; err != nil {
		// A failed read of a committed claim: its rows wait for their lease to expire (and
		// the marks are forgotten, so that the next claims look at them again).
		d.low.forget()
		return nil, fmt.Errorf("outbox.Dispatcher.claim: %w", err)
	}
	d.metrics.Claim.Observe(time.Since(start).Seconds())
	// Held rows left the due index: the marks pass them as they pass leased ones.
	d.low.advance(marks, wss, now, out)
	return out, nil
}

// collectClaimed reads claimed rows. The metadata is context (correlation, trace, occurred
// at): a row whose metadata is not an object of strings is delivered without it rather than
// held back.
func collectClaimed(rows pgx.Rows) (out []claimed, now time.Time, err error) {
	for rows.Next() {
		var c claimed
		var meta []byte
		if err := rows.Scan(&c.ID, &c.WorkspaceID, &c.EventType, &c.Destination, &c.Payload, &meta, &c.CreatedAt, &c.Attempts,
			&c.DueAt, &now, &c.AggregateType, &c.AggregateID, &c.Held, &c.Lane); err != nil {
			return nil, time.Time{}, err
		}
		c.Metadata = parseMetadata(meta)
		out = append(out, c)
	}
	return out, now, rows.Err()
}

// pendingByID is how the statements that find claimed rows by id (mark, release) say
// "pending": with their locked_by = claim condition, status <> 'dead_letter' is the same rows
// as status = 'pending' (the column's CHECK allows pending, held and dead_letter, and a held
// row carries no lease), and unlike it does not match outbox_events_due's predicate. Under the
// generic plans the dispatcher's transactions use (plan_cache_mode, scope.go), the planner
// chose that partial index, its row estimate one, over the primary key for id = ANY($1),
// and read the whole index: every entry of every workspace, and while a snapshot is held
// the dead entry of every event dispatched since (each mark's time grew with the hold).
const pendingByID = `status <> 'dead_letter'`

// markDispatchedSQL moves the events $1 that claim $2 still holds from outbox_events to the
// log of dispatched events (outbox_dispatched), in one statement, and returns their dispatch
// latency.
const markDispatchedSQL = `
	WITH m AS (
	  DELETE FROM outbox_events
	  WHERE id = ANY($1) AND locked_by = $2 AND ` + pendingByID + `
	  RETURNING id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload, metadata,
	            attempt_count, created_at)
	INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type, aggregate_id,
	                               event_payload, metadata, attempt_count, created_at, dispatched_at)
	SELECT id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload, metadata,
	       attempt_count, created_at, clock_timestamp() FROM m
	RETURNING extract(epoch FROM dispatched_at - created_at)::float8`

// markFailedSQL records failed deliveries where claim $5 still holds them (pending, found by
// id: pendingByID): attempt_count+1,
// lease released, due again after the event's backoff, or dead_letter from attempt $4 on,
// with the sanitized last_error.
const markFailedSQL = `
	UPDATE outbox_events o
	SET attempt_count = o.attempt_count + 1,
	    status = CASE WHEN o.attempt_count + 1 >= $4 THEN 'dead_letter' ELSE 'pending' END,
	    next_attempt_at = now() + make_interval(secs => f.delay),
	    last_error = f.err, locked_by = NULL, locked_until = NULL
	FROM unnest($1::uuid[], $2::float8[], $3::text[]) AS f(id, delay, err)
	WHERE o.id = f.id AND o.locked_by = $5 AND o.` + pendingByID + `
	RETURNING o.status`

// releaseSQL hands unpublished claims back: lease released (a HOT update), attempt not
// counted.
const releaseSQL = `
	UPDATE outbox_events SET locked_by = NULL, locked_until = NULL
	WHERE id = ANY($1) AND locked_by = $2 AND ` + pendingByID

// mark records the outcome of one round under token, only where the claim still holds the
// events (a stale dispatcher cannot overwrite a newer claim): published ones dispatched
// (observing their latency), failed ones back to pending with backoff or dead_letter past
// MaxAttempts. One transaction per outcome, scoped to the round's workspaces, both in one
// round trip.
func (d *Dispatcher) mark(ctx context.Context, token string, published, failed []claimed, errs []error) error {
	var stmts []scopedStmt
	var latencies []float64
	if len(published) > 0 {
		stmts = append(stmts, scopedStmt{wss: workspacesOf(published), sql: markDispatchedSQL, args: []any{idsOf(published), token},
			read: func(rows pgx.Rows) error {
				lat, err := pgx.CollectRows(rows, pgx.RowTo[float64])
				latencies = append(latencies, lat...)
				return err
			}})
	}
	dead := 0
	msgs := make([]string, len(failed))
	if len(failed) > 0 {
		delays := make([]float64, len(failed))
		for i, f := range failed {
			delays[i] = backoff(d.cfg.BackoffBase, d.cfg.BackoffMax, f.Attempts+1).Seconds()
			msgs[i] = SanitizeError(errs[i], d.cfg.ErrorMaxLen)
		}
		stmts = append(stmts, scopedStmt{wss: workspacesOf(failed), sql: markFailedSQL, args: []any{idsOf(failed), delays, msgs, d.cfg.MaxAttempts, token},
			read: func(rows pgx.Rows) error {
				st, err := pgx.CollectRows(rows, pgx.RowTo[string])
				dead += countOf(st, StatusDeadLetter)
				return err
			}})
	}
	markErrs := slices.DeleteFunc(inWorkspaces(ctx, d.pool, stmts), func(err error) bool { return err == nil })
	if len(markErrs) > 0 {
		d.low.forget() // events left leased below the marks: found again when their lease ends
	}
	for _, s := range latencies {
		d.metrics.Latency.Observe(s)
	}
	if lost := len(published) - len(latencies); lost > 0 && len(markErrs) == 0 {
		d.log.Warn("outbox lease lost before marking; another dispatcher holds the events", "events", lost)
	}
	if len(failed) > 0 {
		d.metrics.DeadLettered.Add(float64(dead))
		d.log.Warn("outbox delivery failed", "events", len(failed), "dead_lettered", dead, "first_event_id", failed[0].ID,
			"workspace_id", failed[0].WorkspaceID, "event_type", failed[0].EventType, "destination", failed[0].Destination, "error", msgs[0])
	}
	if len(markErrs) > 0 {
		return fmt.Errorf("outbox.Dispatcher.mark: %w", errors.Join(markErrs...))
	}
	return nil
}

func countOf[T comparable](s []T, v T) (n int) {
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// release hands unpublished claims back (pending, no lock, attempt not counted).
func (d *Dispatcher) release(ctx context.Context, token string, rows []claimed) {
	if len(rows) == 0 {
		return
	}
	st := scopedStmt{wss: workspacesOf(rows), sql: releaseSQL, args: []any{idsOf(rows), token}}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ShutdownTimeout)
	defer cancel()
	err := inWorkspaces(ctx, d.pool, []scopedStmt{st})[0]
	d.low.forget() // the released events keep their due time, below the marks
	if err != nil {
		d.log.Warn("outbox release failed; the lease will expire", "events", len(rows),
			"error", SanitizeError(fmt.Errorf("outbox.Dispatcher.release: %w", err), d.cfg.ErrorMaxLen))
	}
}
