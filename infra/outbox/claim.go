package outbox

import (
	"context"
	"encoding/json"
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
	Payload     []byte
	Metadata    map[string]string
	CreatedAt   time.Time
	Attempts    int
}

// byWorkspace indexes rows by workspace.
func byWorkspace(rows []claimed) map[uuid.UUID][]int {
	m := map[uuid.UUID][]int{}
	for i, r := range rows {
		m[r.WorkspaceID] = append(m[r.WorkspaceID], i)
	}
	return m
}

// idsOf returns the event ids of rows[idx].
func idsOf(rows []claimed, idx []int) []uuid.UUID {
	ids := make([]uuid.UUID, len(idx))
	for k, i := range idx {
		ids[k] = rows[i].ID
	}
	return ids
}

// claimSQL selects up to $2 due rows of workspace $1 (expired leases first, then pending by
// next_attempt_at) with FOR UPDATE SKIP LOCKED, each side along its own partial index, and
// marks them dispatching under token $3 with a lease of $4 ms. A reclaimed expired lease
// counts as an attempt; one that reaches MaxAttempts ($5) goes to dead_letter instead of
// being claimed again (an event whose every delivery ends without an outcome, e.g. one that
// crashes its dispatcher, stops there). Rows locked beyond the limit are released unchanged
// at commit.
const claimSQL = `
	WITH e AS (
	  SELECT id, attempt_count FROM outbox_events
	  WHERE workspace_id = $1 AND status = 'dispatching' AND locked_until <= now()
	  ORDER BY locked_until LIMIT $2 FOR UPDATE SKIP LOCKED),
	dead AS (
	  UPDATE outbox_events o
	  SET status = 'dead_letter', attempt_count = o.attempt_count + 1, locked_by = NULL, locked_until = NULL,
	      last_error = 'lease expired before any delivery outcome was recorded, ' || (o.attempt_count + 1) || ' attempts'
	  FROM e WHERE o.id = e.id AND e.attempt_count + 1 >= $5),
	p AS (
	  SELECT id FROM outbox_events
	  WHERE workspace_id = $1 AND status = 'pending' AND next_attempt_at <= now()
	  ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED),
	c AS (
	  SELECT id, 1 AS expired FROM e WHERE e.attempt_count + 1 < $5 UNION ALL SELECT id, 0 FROM p LIMIT $2)
	UPDATE outbox_events o
	SET status = 'dispatching', locked_by = $3, locked_until = now() + $4 * interval '1 millisecond',
	    attempt_count = o.attempt_count + c.expired
	FROM c WHERE o.id = c.id
	RETURNING o.id, o.workspace_id, o.event_type, o.destination, o.event_payload, o.metadata, o.created_at, o.attempt_count`

// claim claims up to limit due rows of each of wss under token, each workspace in a committed
// transaction of its own, all in one round trip. It returns the rows of the claims that
// committed, and the failures of the others (their rows stay due).
func (d *Dispatcher) claim(ctx context.Context, wss []uuid.UUID, token string, limit int) ([]claimed, error) {
	got := make([][]claimed, len(wss))
	stmts := make([]scopedStmt, len(wss))
	for i, ws := range wss {
		stmts[i] = scopedStmt{ws: ws, sql: claimSQL, args: []any{ws, limit, token, d.cfg.Lease.Milliseconds(), d.cfg.MaxAttempts},
			read: func(rows pgx.Rows) (err error) {
				got[i], err = collectClaimed(rows)
				return err
			}}
	}
	var out []claimed
	var failed []error
	for i, err := range inWorkspaces(ctx, d.pool, stmts) {
		if err != nil {
			failed = append(failed, fmt.Errorf("workspace %s: %w", wss[i], err))
			continue
		}
		out = append(out, got[i]...)
	}
	if len(failed) > 0 {
		return out, fmt.Errorf("outbox.Dispatcher.claim: %w", errors.Join(failed...))
	}
	return out, nil
}

// collectClaimed reads claimed rows. The metadata is context (correlation, trace, occurred
// at): a row whose metadata is not an object of strings is delivered without it rather than
// held back.
func collectClaimed(rows pgx.Rows) ([]claimed, error) {
	var out []claimed
	for rows.Next() {
		var c claimed
		var meta []byte
		if err := rows.Scan(&c.ID, &c.WorkspaceID, &c.EventType, &c.Destination, &c.Payload, &meta, &c.CreatedAt, &c.Attempts); err != nil {
			return nil, err
		}
		if json.Unmarshal(meta, &c.Metadata) != nil {
			c.Metadata = nil
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// markDispatchedSQL sets the events $1 dispatched where claim $2 still holds them, and
// returns their dispatch latency.
const markDispatchedSQL = `
	UPDATE outbox_events
	SET status = 'dispatched', dispatched_at = clock_timestamp(), locked_by = NULL, locked_until = NULL, last_error = NULL
	WHERE id = ANY($1) AND locked_by = $2 AND status = 'dispatching'
	RETURNING extract(epoch FROM dispatched_at - created_at)::float8`

// markFailedSQL records failed deliveries where claim $5 still holds them: attempt_count+1,
// back to pending after the event's backoff, or dead_letter from attempt $4 on, with the
// sanitized last_error.
const markFailedSQL = `
	UPDATE outbox_events o
	SET attempt_count = o.attempt_count + 1,
	    status = CASE WHEN o.attempt_count + 1 >= $4 THEN 'dead_letter' ELSE 'pending' END,
	    next_attempt_at = now() + make_interval(secs => f.delay),
	    last_error = f.err, locked_by = NULL, locked_until = NULL
	FROM unnest($1::uuid[], $2::float8[], $3::text[]) AS f(id, delay, err)
	WHERE o.id = f.id AND o.locked_by = $5 AND o.status = 'dispatching'
	RETURNING o.status`

// releaseSQL hands unpublished claims back: pending, no lock, attempt not counted.
const releaseSQL = `
	UPDATE outbox_events SET status = 'pending', locked_by = NULL, locked_until = NULL
	WHERE id = ANY($1) AND locked_by = $2 AND status = 'dispatching'`

// mark records the outcome of one round under token, only where the claim still holds the
// events (a stale dispatcher cannot overwrite a newer claim): published ones dispatched
// (observing their latency), failed ones back to pending with backoff or dead_letter past
// MaxAttempts. One transaction per workspace and outcome, all in one round trip.
func (d *Dispatcher) mark(ctx context.Context, token string, published, failed []claimed, errs []error) error {
	var stmts []scopedStmt
	var expected int
	var latencies []float64
	for ws, idx := range byWorkspace(published) {
		ids := idsOf(published, idx)
		expected += len(ids)
		stmts = append(stmts, scopedStmt{ws: ws, sql: markDispatchedSQL, args: []any{ids, token},
			read: func(rows pgx.Rows) error {
				lat, err := pgx.CollectRows(rows, pgx.RowTo[float64])
				latencies = append(latencies, lat...)
				return err
			}})
	}
	dead := 0
	msgs := make([]string, len(failed))
	for ws, idx := range byWorkspace(failed) {
		ids := idsOf(failed, idx)
		delays := make([]float64, len(idx))
		wsMsgs := make([]string, len(idx))
		for k, i := range idx {
			delays[k] = backoff(d.cfg.BackoffBase, d.cfg.BackoffMax, failed[i].Attempts+1).Seconds()
			msgs[i] = SanitizeError(errs[i], d.cfg.ErrorMaxLen)
			wsMsgs[k] = msgs[i]
		}
		stmts = append(stmts, scopedStmt{ws: ws, sql: markFailedSQL, args: []any{ids, delays, wsMsgs, d.cfg.MaxAttempts, token},
			read: func(rows pgx.Rows) error {
				st, err := pgx.CollectRows(rows, pgx.RowTo[string])
				dead += countOf(st, StatusDeadLetter)
				return err
			}})
	}
	markErrs := slices.DeleteFunc(inWorkspaces(ctx, d.pool, stmts), func(err error) bool { return err == nil })
	for _, s := range latencies {
		d.metrics.Latency.Observe(s)
	}
	if lost := expected - len(latencies); lost > 0 && len(markErrs) == 0 {
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
	var stmts []scopedStmt
	for ws, idx := range byWorkspace(rows) {
		stmts = append(stmts, scopedStmt{ws: ws, sql: releaseSQL, args: []any{idsOf(rows, idx), token}})
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ShutdownTimeout)
	defer cancel()
	if err := errors.Join(inWorkspaces(ctx, d.pool, stmts)...); err != nil {
		d.log.Warn("outbox release failed; the lease will expire", "events", len(rows),
			"error", SanitizeError(fmt.Errorf("outbox.Dispatcher.release: %w", err), d.cfg.ErrorMaxLen))
	}
}
