package outbox

import (
	"context"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// markDispatchedSQL sets each event of $1 dispatched where the claim of the same position in
// $2 still holds it, and returns the ids it set with their dispatch latency. The rows are
// found by primary key (id = ANY), then checked against their own claim's token: one
// statement marks the rounds of several claims.
const markDispatchedSQL = `
	UPDATE outbox_events
	SET status = 'dispatched', dispatched_at = clock_timestamp(), locked_by = NULL, locked_until = NULL, last_error = NULL
	WHERE id = ANY($1) AND status = 'dispatching'
	  AND (id, locked_by) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))
	RETURNING id, extract(epoch FROM dispatched_at - created_at)::float8`

// markGroup marks published events dispatched with group commit: one statement, in one
// transaction, is in flight per Dispatcher, and the rounds that finish publishing meanwhile
// are marked together by the next one. A round's worker waits for its own rows' outcome, so
// marking is still done when deliver returns; but under a steady stream of small rounds the
// database commits one mark for many of them instead of one each.
type markGroup struct {
	mu      sync.Mutex
	queued  []*markRequest
	leading bool // a caller is running statements for the queue
}

// markRequest is one round's published rows under its claim token, and, once done is
// closed, what came of them.
type markRequest struct {
	token string
	rows  []claimed
	done  chan struct{}
	// latencies holds the dispatch latency of each row that was marked (the claim still held
	// it); err is set when the statement carrying the request failed.
	latencies []float64
	err       error
}

// markDispatched marks rows (published under token) dispatched, together with whatever other
// rounds are waiting, and returns the latencies of the rows it marked. The first caller to
// find no statement in flight runs statements until the queue is empty; the others wait for
// theirs.
func (d *Dispatcher) markDispatched(ctx context.Context, token string, rows []claimed) ([]float64, error) {
	g := &d.marks
	req := &markRequest{token: token, rows: rows, done: make(chan struct{})}
	g.mu.Lock()
	g.queued = append(g.queued, req)
	if g.leading {
		g.mu.Unlock()
		<-req.done
		return req.latencies, req.err
	}
	g.leading = true
	for len(g.queued) > 0 {
		batch := g.queued
		g.queued = nil
		g.mu.Unlock()
		d.runMarks(ctx, batch)
		g.mu.Lock()
	}
	g.leading = false
	g.mu.Unlock()
	return req.latencies, req.err
}

// runMarks marks the rows of batch in one scoped transaction and completes each request.
func (d *Dispatcher) runMarks(ctx context.Context, batch []*markRequest) {
	var ids []uuid.UUID
	var tokens []string
	var rows []claimed
	owner := map[uuid.UUID]*markRequest{}
	for _, r := range batch {
		for _, c := range r.rows {
			ids = append(ids, c.ID)
			tokens = append(tokens, r.token)
			owner[c.ID] = r
		}
		rows = append(rows, r.rows...)
	}
	st := scopedStmt{wss: workspacesOf(rows), sql: markDispatchedSQL, args: []any{ids, tokens},
		read: func(res pgx.Rows) error {
			for res.Next() {
				var id uuid.UUID
				var lat float64
				if err := res.Scan(&id, &lat); err != nil {
					return err
				}
				if r := owner[id]; r != nil {
					r.latencies = append(r.latencies, lat)
				}
			}
			return res.Err()
		}}
	err := inWorkspaces(ctx, d.pool, []scopedStmt{st})[0]
	for _, r := range batch {
		r.err = err
		close(r.done)
	}
}
