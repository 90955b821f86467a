package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
)

// Ops is the operators' view of the outbox (`app outbox stats|list|show|redrive|purge`). It runs
// as listing_operator: Stats goes through the SECURITY DEFINER function outbox_stats
// (aggregates only), which only that role may run; every other call is scoped to one
// workspace by RLS.
type Ops struct {
	pool *pgxpool.Pool
}

// NewOps returns Ops on pool (the listing_operator pool, OPERATOR_DATABASE_URL).
func NewOps(pool *pgxpool.Pool) *Ops { return &Ops{pool: pool} }

// StatusStats aggregates the events of one status across workspaces.
type StatusStats struct {
	Events     int64 `json:"events"`
	Workspaces int64 `json:"workspaces"`
	// Due counts pending events whose next attempt is due and dispatching events whose lease
	// expired.
	Due int64 `json:"due"`
	// OldestCreatedAt is the creation time of the oldest event (nil when none).
	OldestCreatedAt *time.Time `json:"oldest_created_at"`
}

// Stats is the outbox across all workspaces.
type Stats struct {
	At       time.Time              `json:"at"`
	ByStatus map[string]StatusStats `json:"by_status"`
	// OldestPendingAge is the age of the oldest event not yet delivered (pending or
	// dispatching); zero when none.
	OldestPendingAge time.Duration `json:"-"`
	// Delivered is what the log of dispatched events says of the last hour.
	Delivered Delivered `json:"delivered"`
}

// Delivered counts the events delivered (moved to the log of dispatched events) in the hour
// before Stats.At.
type Delivered struct {
	// LastMinute counts the minute before Stats.At; LastHour the hour.
	LastMinute int64 `json:"last_minute"`
	LastHour   int64 `json:"last_hour"`
	// ByDestination counts the hour per destination (queue or stream).
	ByDestination map[string]int64 `json:"by_destination"`
	// PerMinute counts each of the hour's 60 minutes, the oldest first; the last is the
	// minute of Stats.At, still running.
	PerMinute []int64 `json:"per_minute"`
	// MaxLatency is the slowest commit → delivery of the hour.
	MaxLatency time.Duration `json:"-"`
}

// Stats returns per-status counts and the oldest pending age across workspaces.
func (o *Ops) Stats(ctx context.Context) (Stats, error) {
	st := Stats{ByStatus: map[string]StatusStats{}}
	if err := o.pool.QueryRow(ctx, `SELECT now()`).Scan(&st.At); err != nil {
		return Stats{}, fmt.Errorf("outbox.Ops.Stats: %w", err)
	}
	rows, err := o.pool.Query(ctx, `
		SELECT status, events, workspaces, due, oldest_created_at FROM outbox_stats($1)`, st.At)
	if err != nil {
		return Stats{}, fmt.Errorf("outbox.Ops.Stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var v StatusStats
		if err := rows.Scan(&s, &v.Events, &v.Workspaces, &v.Due, &v.OldestCreatedAt); err != nil {
			return Stats{}, fmt.Errorf("outbox.Ops.Stats: %w", err)
		}
		st.ByStatus[s] = v
	}
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("outbox.Ops.Stats: %w", err)
	}
	for _, s := range []string{StatusPending, StatusDispatching} {
		if v := st.ByStatus[s]; v.Events > 0 && v.OldestCreatedAt != nil {
			if age := st.At.Sub(*v.OldestCreatedAt); age > st.OldestPendingAge {
				st.OldestPendingAge = age
			}
		}
	}
	if st.Delivered, err = o.delivered(ctx, st.At); err != nil {
		return Stats{}, err
	}
	return st, nil
}

// delivered reads the log's last hour before now through operator_outbox_delivered
// (sql/039), per minute and destination.
func (o *Ops) delivered(ctx context.Context, now time.Time) (Delivered, error) {
	d := Delivered{ByDestination: map[string]int64{}, PerMinute: make([]int64, 60)}
	last := now.UTC().Truncate(time.Minute)
	first := last.Add(-59 * time.Minute)
	rows, err := o.pool.Query(ctx, `SELECT minute, destination, events, max_latency FROM operator_outbox_delivered($1)`, first)
	if err != nil {
		return Delivered{}, fmt.Errorf("outbox.Ops.Stats: delivered: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var minute time.Time
		var dest string
		var n int64
		var latency pgtype.Interval
		if err := rows.Scan(&minute, &dest, &n, &latency); err != nil {
			return Delivered{}, fmt.Errorf("outbox.Ops.Stats: delivered: %w", err)
		}
		i := int(minute.Sub(first) / time.Minute)
		if i < 0 || i >= len(d.PerMinute) {
			continue // delivered after now was read
		}
		d.PerMinute[i] += n
		d.ByDestination[dest] += n
		d.LastHour += n
		d.MaxLatency = max(d.MaxLatency, time.Duration(latency.Microseconds+int64(latency.Days)*86_400_000_000)*time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		return Delivered{}, fmt.Errorf("outbox.Ops.Stats: delivered: %w", err)
	}
	d.LastMinute = d.PerMinute[len(d.PerMinute)-1]
	return d, nil
}

// EventSummary is one outbox row without its payload.
type EventSummary struct {
	ID            uuid.UUID  `json:"id"`
	WorkspaceID   uuid.UUID  `json:"workspace_id"`
	EventType     string     `json:"event_type"`
	Destination   string     `json:"destination"`
	AggregateType string     `json:"aggregate_type"`
	AggregateID   string     `json:"aggregate_id"`
	Status        string     `json:"status"`
	AttemptCount  int        `json:"attempt_count"`
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	LockedBy      string     `json:"locked_by,omitempty"`
	LockedUntil   *time.Time `json:"locked_until,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	DispatchedAt  *time.Time `json:"dispatched_at,omitempty"`
}

// Redrive is one recorded redrive of an event.
type Redrive struct {
	By                   string    `json:"redriven_by"`
	Reason               string    `json:"reason"`
	At                   time.Time `json:"redriven_at"`
	PreviousAttemptCount int       `json:"previous_attempt_count"`
	PreviousLastError    string    `json:"previous_last_error,omitempty"`
}

// EventDetail is one outbox row with payload, metadata and redrive history. The payload
// holds IDs and versions only (see domain.Event), so showing it to operators is safe.
type EventDetail struct {
	EventSummary
	Payload  json.RawMessage   `json:"payload"`
	Metadata map[string]string `json:"metadata"`
	Redrives []Redrive         `json:"redrives"`
}

// ListParams selects events for List.
type ListParams struct {
	// WorkspaceID is required.
	WorkspaceID uuid.UUID
	// Status filters by status; empty lists every status.
	Status string
	// Limit defaults to 50, at most 1000.
	Limit int
	// Before lists events created before this cursor (the CreatedAt/ID of the last event of
	// the previous page); zero starts at the newest.
	BeforeCreatedAt time.Time
	BeforeID        uuid.UUID
}

// summaryColumns are read from outbox_all_events (sql/018): the live events and the log of
// dispatched ones, with the status operators see.
const summaryColumns = `id, workspace_id, event_type, destination, aggregate_type, aggregate_id, status,
	attempt_count, next_attempt_at, coalesce(locked_by, ''), locked_until, coalesce(last_error, ''), created_at, dispatched_at`

func scanSummary(row pgx.Row, e *EventSummary, extra ...any) error {
	return row.Scan(append([]any{&e.ID, &e.WorkspaceID, &e.EventType, &e.Destination, &e.AggregateType, &e.AggregateID,
		&e.Status, &e.AttemptCount, &e.NextAttemptAt, &e.LockedBy, &e.LockedUntil, &e.LastError, &e.CreatedAt,
		&e.DispatchedAt}, extra...)...)
}

func validStatus(s string) bool {
	switch s {
	case StatusPending, StatusHeld, StatusDispatching, StatusDispatched, StatusDeadLetter:
		return true
	}
	return false
}

// List returns events of one workspace, newest first.
func (o *Ops) List(ctx context.Context, p ListParams) ([]EventSummary, error) {
	if p.WorkspaceID == uuid.Nil {
		return nil, errors.New("outbox.Ops.List: workspace id is required")
	}
	if p.Status != "" && !validStatus(p.Status) {
		return nil, fmt.Errorf("outbox.Ops.List: unknown status %q", p.Status)
	}
	if p.Limit <= 0 {
		p.Limit = 50
	}
	p.Limit = min(p.Limit, 1000)
	var out []EventSummary
	err := postgres.InTx(ctx, o.pool, postgres.Scope{WorkspaceID: p.WorkspaceID}, func(ctx context.Context, tx pgx.Tx) error {
		q := `SELECT ` + summaryColumns + ` FROM outbox_all_events
			WHERE workspace_id = $1 AND ($2 = '' OR status = $2)
			  AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
			ORDER BY created_at DESC, id DESC LIMIT $5`
		var before *time.Time
		if !p.BeforeCreatedAt.IsZero() {
			before = &p.BeforeCreatedAt
		}
		rows, err := tx.Query(ctx, q, p.WorkspaceID, p.Status, before, p.BeforeID, p.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e EventSummary
			if err := scanSummary(rows, &e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("outbox.Ops.List: %w", err)
	}
	return out, nil
}

// showQuery reads one event by workspace and id: in the log, through the index on id
// (sql/029), not the workspace's whole history.
const showQuery = `SELECT ` + summaryColumns + `, event_payload, metadata FROM outbox_all_events
	WHERE workspace_id = $1 AND id = $2`

// Show returns one event of a workspace; domain.ErrNotFound when the workspace has no such
// event.
func (o *Ops) Show(ctx context.Context, workspaceID, eventID uuid.UUID) (EventDetail, error) {
	var e EventDetail
	err := postgres.InTx(ctx, o.pool, postgres.Scope{WorkspaceID: workspaceID}, func(ctx context.Context, tx pgx.Tx) error {
		row := tx.QueryRow(ctx, showQuery, workspaceID, eventID)
		if err := scanSummary(row, &e.EventSummary, &e.Payload, &e.Metadata); err != nil {
			return postgres.TranslateError(err)
		}
		rows, err := tx.Query(ctx, `SELECT redriven_by, reason, redriven_at, previous_attempt_count, coalesce(previous_last_error, '')
			FROM outbox_redrives WHERE workspace_id = $1 AND event_id = $2 ORDER BY redriven_at`, workspaceID, eventID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r Redrive
			if err := rows.Scan(&r.By, &r.Reason, &r.At, &r.PreviousAttemptCount, &r.PreviousLastError); err != nil {
				return err
			}
			e.Redrives = append(e.Redrives, r)
		}
		return rows.Err()
	})
	if err != nil {
		return EventDetail{}, fmt.Errorf("outbox.Ops.Show: %w", err)
	}
	return e, nil
}

// DeadLetters selects dead letters of one workspace for an operator's redrive or purge, and
// says who acts and why (both recorded).
type DeadLetters struct {
	// WorkspaceID is required.
	WorkspaceID uuid.UUID
	// EventIDs names the events; empty with All set selects every dead letter of the
	// workspace.
	EventIDs []uuid.UUID
	All      bool
	// By names the operator (required, at most MaxOperatorLength bytes); Reason says why
	// (required, at most MaxReasonLength bytes).
	By     string
	Reason string
}

// Bounds of the operator's text recorded with a redrive or a purge, in bytes (the columns'
// CHECKs count characters, never more than bytes).
const (
	MaxOperatorLength = 200
	MaxReasonLength   = 1000
)

func (p *DeadLetters) validate(op string) error {
	p.By, p.Reason = strings.TrimSpace(p.By), strings.TrimSpace(p.Reason)
	switch {
	case p.WorkspaceID == uuid.Nil:
		return fmt.Errorf("outbox.Ops.%s: workspace id is required", op)
	case p.By == "" || len(p.By) > MaxOperatorLength:
		return fmt.Errorf("outbox.Ops.%s: operator (by) is required, at most %d bytes", op, MaxOperatorLength)
	case p.Reason == "" || len(p.Reason) > MaxReasonLength:
		return fmt.Errorf("outbox.Ops.%s: reason is required, at most %d bytes", op, MaxReasonLength)
	case len(p.EventIDs) == 0 && !p.All:
		return fmt.Errorf("outbox.Ops.%s: name events or set All", op)
	}
	return nil
}

// deadLetterAction runs stmt (which receives workspace, all, event ids, by, reason and returns
// the ids acted on) in one transaction scoped to p's workspace.
func (o *Ops) deadLetterAction(ctx context.Context, op string, p DeadLetters, stmt string) ([]uuid.UUID, error) {
	if err := p.validate(op); err != nil {
		return nil, err
	}
	var ids []uuid.UUID
	err := postgres.InTx(ctx, o.pool, postgres.Scope{WorkspaceID: p.WorkspaceID}, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, stmt, p.WorkspaceID, p.All, p.EventIDs, p.By, p.Reason)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox.Ops.%s: %w", op, err)
	}
	return ids, nil
}

// Redrive sets the selected dead_letter events back to pending, due now, with attempt_count
// reset, and records who, when and why in outbox_redrives, in one transaction. Events not in
// dead_letter are left alone. It returns the ids redriven.
func (o *Ops) Redrive(ctx context.Context, p DeadLetters) ([]uuid.UUID, error) {
	return o.deadLetterAction(ctx, "Redrive", p, `
		WITH d AS (
		  SELECT id, attempt_count, last_error FROM outbox_events
		  WHERE workspace_id = $1 AND status = 'dead_letter' AND ($2 OR id = ANY($3))
		  FOR UPDATE),
		u AS (
		  UPDATE outbox_events o SET status = 'pending', attempt_count = 0, next_attempt_at = now(),
		         locked_by = NULL, locked_until = NULL
		  FROM d WHERE o.id = d.id RETURNING o.id),
		a AS (
		  INSERT INTO outbox_redrives (id, workspace_id, event_id, redriven_by, reason, previous_attempt_count, previous_last_error)
		  SELECT gen_random_uuid(), $1, d.id, $4, $5, d.attempt_count, d.last_error FROM d)
		SELECT id FROM u`)
}

// Purge deletes the selected dead_letter events for good and records who, when and why in
// outbox_purges with what each event was (type, destination, attempts, last error; not its
// payload), in one transaction. Events not in dead_letter are left alone. It returns the ids
// purged.
func (o *Ops) Purge(ctx context.Context, p DeadLetters) ([]uuid.UUID, error) {
	return o.deadLetterAction(ctx, "Purge", p, `
		WITH d AS (
		  DELETE FROM outbox_events
		  WHERE workspace_id = $1 AND status = 'dead_letter' AND ($2 OR id = ANY($3))
		  RETURNING id, event_type, destination, created_at, attempt_count, last_error),
		a AS (
		  INSERT INTO outbox_purges (id, workspace_id, event_id, event_type, destination, event_created_at,
		                             attempt_count, last_error, purged_by, reason)
		  SELECT gen_random_uuid(), $1, d.id, d.event_type, d.destination, d.created_at,
		         d.attempt_count, d.last_error, $4, $5 FROM d)
		SELECT id FROM d`)
}

// ErrNotFound is domain.ErrNotFound, re-exported for callers of Show.
var ErrNotFound = domain.ErrNotFound
