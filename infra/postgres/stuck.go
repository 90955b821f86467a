package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/app/port"
)

// StuckTasks implements port.StuckTasks over the task tables of the registered flows
// (sql/026_task_tables.sql).
type StuckTasks struct {
	Pool *pgxpool.Pool
	// Session holds Exclusive's session-level lock: a pool that reaches PostgreSQL directly
	// (not through a pooler in transaction mode). Optional: Pool when nil.
	Session *pgxpool.Pool
	// Tables are the flows' task tables (app/worker/flows.TaskTables): a queue's stuck tasks
	// are found in its table.
	Tables []port.TaskTable
}

var _ port.StuckTasks = StuckTasks{}

// stuckQuery is, per queue, how to find its stuck tasks: the task table, and how the task's
// request event is known to the outbox (its aggregate and the payload field holding the task
// id), so that a task the outbox still owes a delivery is not taken for stuck. The outbox
// answers through outbox_owes_task and outbox_last_dispatched_job (sql/017), under RLS.
type stuckQuery struct {
	table, aggregateType, aggregateColumn, payloadKey string
}

// stuckQueryOf derives queue's stuckQuery from its task table.
func (s StuckTasks) stuckQueryOf(queue string) (stuckQuery, bool) {
	for _, t := range s.Tables {
		if t.Queue == queue {
			return stuckQuery{t.Table, t.AggregateType, t.AggregateColumn, t.TaskIDField}, true
		}
	}
	return stuckQuery{}, false
}

func (q stuckQuery) sql() string {
	args := fmt.Sprintf(`$2, t.%s::text, $3, t.id::text`, q.aggregateColumn)
	return fmt.Sprintf(`SELECT t.id, coalesce(outbox_last_dispatched_job(%s)::text, ''),
  outbox_first_dispatched_at(%s)
FROM %s t
WHERE t.status IN ('pending', 'running') AND t.updated_at < $1
  AND t.updated_at < $1 - (power(2, least(t.redeliveries, $6)) - 1) * $5::bigint * interval '1 microsecond'
  AND NOT outbox_owes_task(%s)
ORDER BY t.updated_at, t.id
LIMIT $4
FOR UPDATE OF t SKIP LOCKED`, args, args, q.table, args)
}

// Workspaces implements port.StuckTasks.
func (s StuckTasks) Workspaces(ctx context.Context, before time.Time, limit int) ([]uuid.UUID, error) {
	rows, err := s.Pool.Query(ctx, `SELECT workspace_id FROM stuck_task_workspaces($1, $2)`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres.StuckTasks.Workspaces: %w", TranslateError(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("postgres.StuckTasks.Workspaces: %w", TranslateError(err))
	}
	return ids, nil
}

// Find implements port.StuckTasks.
func (s StuckTasks) Find(ctx context.Context, queue string, before time.Time, backoff time.Duration, limit int) ([]port.StuckTask, error) {
	const op = "postgres.StuckTasks.Find"
	q, ok := s.stuckQueryOf(queue)
	if !ok {
		return nil, fmt.Errorf("%s: no task table for queue %q", op, queue)
	}
	tx, _, err := mustTx(ctx, op)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, q.sql(), before, q.aggregateType, q.payloadKey, limit, backoff.Microseconds(),
		port.MaxRedeliveryDoublings)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (port.StuckTask, error) {
		var t port.StuckTask
		return t, row.Scan(&t.ID, &t.LastJobID, (*nullTime)(&t.FirstDispatchedAt))
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	return tasks, nil
}

// Exclusive implements port.StuckTasks with a session-level advisory lock held on a
// connection of Session (Pool when nil) for the duration of fn; the lock goes with the
// session if the process dies.
func (s StuckTasks) Exclusive(ctx context.Context, name string, fn func(ctx context.Context) error) (bool, error) {
	const op = "postgres.StuckTasks.Exclusive"
	pool := s.Session
	if pool == nil {
		pool = s.Pool
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	defer conn.Release()
	h := fnv.New64a()
	_, _ = h.Write([]byte("listing exclusive: " + name))
	key := int64(h.Sum64())
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got); err != nil {
		return false, fmt.Errorf("%s: %w", op, TranslateError(err))
	}
	if !got {
		return false, nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, key); err != nil {
			// A session that cannot unlock must not go back to the pool still holding it.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	return true, fn(ctx)
}
