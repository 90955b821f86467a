package outbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// sessionScope reads, on conn outside any transaction, the workspace setting and the number of
// outbox rows app_user sees: an unscoped session must see "" and 0.
func sessionScope(t *testing.T, conn *pgx.Conn) (string, int) {
	t.Helper()
	require.Equal(t, byte('I'), conn.PgConn().TxStatus(), "connection left inside a transaction")
	var ws, syncCommit string
	var n int
	require.NoError(t, conn.QueryRow(context.Background(),
		`SELECT coalesce(current_setting('app.workspace_id', true), ''), current_setting('synchronous_commit'),
		        (SELECT count(*)::int FROM outbox_events)`).Scan(&ws, &syncCommit, &n))
	require.NotEqual(t, "off", syncCommit, "synchronous_commit leaked to the next use of the connection")
	return ws, n
}

// claimVisible records, at each Publish, whether every published event is already committed
// as dispatching under a lease, seen from another session.
type claimVisible struct {
	db  *pgtest.DB
	bad chan string
}

func (c claimVisible) Publish(_ string, msgs ...*message.Message) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.UUID
	}
	var n int
	if err := c.db.Owner.QueryRow(context.Background(), `SELECT count(*)::int FROM outbox_events
		WHERE id = ANY($1::uuid[]) AND status = 'pending' AND locked_by IS NOT NULL AND locked_until > now()`, ids).Scan(&n); err != nil {
		c.bad <- err.Error()
	} else if n != len(ids) {
		c.bad <- "published before the claim committed"
	}
	return nil
}

func (claimVisible) Close() error { return nil }

// The claim commits before anything is published.
func TestClaimCommitsBeforePublish(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	wss := []uuid.UUID{createWorkspace(t, db), createWorkspace(t, db)}
	ids := bulkInsert(t, db, wss, 150)
	cv := claimVisible{db: db, bad: make(chan string, 100)}
	d, _ := startDispatcher(t, db, fastConfig(), PublisherMap{testQueue: cv})
	waitFor(t, 20*time.Second, "dispatched", func() bool { return statusCounts(t, db)[StatusDispatched] == len(ids) })
	require.Equal(t, float64(len(ids)), testutilValue(d))
	select {
	case msg := <-cv.bad:
		t.Fatal(msg)
	default:
	}
}

// inWorkspaces runs each statement in a transaction of its own, scoped to its workspace: a
// failing one keeps nothing of itself, the ones before it stay committed, the ones after it
// do not run, and the connection goes back to the pool idle and unscoped.
func TestInWorkspacesOneTransactionEach(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	wss := []uuid.UUID{createWorkspace(t, db), createWorkspace(t, db), createWorkspace(t, db), createWorkspace(t, db)}
	bulkInsert(t, db, wss, 2)
	ctx := context.Background()
	mark := func(ws uuid.UUID, sql string, seen *string) scopedStmt {
		return scopedStmt{wss: []uuid.UUID{ws}, sql: sql, read: func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(seen); err != nil {
					return err
				}
			}
			return nil
		}}
	}
	const ok = `UPDATE outbox_events SET last_error = 'seen' RETURNING current_setting('app.workspace_id') || ':' || current_setting('synchronous_commit')`
	const fails = `UPDATE outbox_events SET last_error = 'seen' RETURNING (1 / 0)::text`
	seen := make([]string, len(wss))
	for range 2 { // the second run reuses the prepared statements
		errs := inWorkspaces(ctx, db.App, []scopedStmt{mark(wss[0], ok, &seen[0]), mark(wss[1], ok, &seen[1])})
		require.Equal(t, []error{nil, nil}, errs)
		require.Equal(t, wss[0].String()+":off", seen[0], "each statement runs scoped to its own workspace")
		require.Equal(t, wss[1].String()+":off", seen[1])
	}
	// One connection only: the one that ran the failing round trip must come back usable.
	cfg := db.App.Config()
	cfg.MaxConns, cfg.MinConns = 1, 0
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer one.Close()
	pid := func() (p uint32) {
		c, err := one.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		return c.Conn().PgConn().PID()
	}
	before := pid()
	errs := inWorkspaces(ctx, one, []scopedStmt{mark(wss[2], ok, &seen[2]), mark(wss[3], fails, &seen[3]), mark(wss[0], ok, &seen[0])})
	require.Equal(t, before, pid(), "the failed transaction was rolled back and the connection kept, not discarded")
	require.NoError(t, errs[0])
	require.ErrorContains(t, errs[1], "division by zero")
	require.ErrorContains(t, errs[2], "not run")

	var byWS []string
	rows, err := db.Owner.Query(ctx, `SELECT workspace_id::text || ':' || count(*) FILTER (WHERE last_error = 'seen')
		FROM outbox_events GROUP BY workspace_id ORDER BY workspace_id`)
	require.NoError(t, err)
	byWS, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	want := []string{wss[0].String() + ":2", wss[1].String() + ":2", wss[2].String() + ":2", wss[3].String() + ":0"}
	slices.Sort(want)
	require.Equal(t, want, byWS)
	// Our own read failing (not the server) fails that group only: it and the later groups
	// committed on the server.
	_, err = db.Owner.Exec(ctx, `UPDATE outbox_events SET last_error = NULL`)
	require.NoError(t, err)
	ours := errors.New("our read failed")
	failingRead := scopedStmt{wss: wss[1:2], sql: ok, read: func(pgx.Rows) error { return ours }}
	errs = inWorkspaces(ctx, db.App, []scopedStmt{mark(wss[0], ok, &seen[0]), failingRead, mark(wss[2], ok, &seen[2])})
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], ours)
	require.NoError(t, errs[2], "the group after a failed read runs")
	var marked int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE last_error = 'seen'`).Scan(&marked))
	require.Equal(t, 6, marked, "all three groups committed")

	for _, c := range db.App.AcquireAllIdle(ctx) {
		gotWS, n := sessionScope(t, c.Conn())
		require.Empty(t, gotWS)
		require.Zero(t, n)
		c.Release()
	}
}

// A transaction scoped to several workspaces (app.workspace_ids, sql/014) sees and changes
// the outbox rows of those workspaces only, and no other table's rows: the list widens the
// outbox's policy for app_user, nothing else.
func TestInWorkspacesListScope(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	wss := []uuid.UUID{createWorkspace(t, db), createWorkspace(t, db), createWorkspace(t, db)}
	bulkInsert(t, db, wss, 3)
	for _, ws := range wss {
		_, err := db.Owner.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, resource_type, resource_id)
			VALUES (gen_random_uuid(), $1, 't', 'r', gen_random_uuid())`, ws)
		require.NoError(t, err)
	}
	var outboxSeen, opsSeen int
	errs := inWorkspaces(ctx, db.App, []scopedStmt{{wss: wss[:2],
		sql: `SELECT (SELECT count(*)::int FROM outbox_events), (SELECT count(*)::int FROM operations)`,
		read: func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&outboxSeen, &opsSeen); err != nil {
					return err
				}
			}
			return nil
		}}})
	require.NoError(t, errs[0])
	require.Equal(t, 6, outboxSeen, "the outbox rows of the two listed workspaces")
	require.Zero(t, opsSeen, "a list scope opens no other table")

	// An update through the list cannot move a row to a workspace outside it.
	errs = inWorkspaces(ctx, db.App, []scopedStmt{{wss: wss[:2],
		sql: `UPDATE outbox_events SET workspace_id = $1 WHERE workspace_id = $2`, args: []any{wss[2], wss[0]}}})
	require.ErrorContains(t, errs[0], "row-level security")
	// Nor touch one outside it.
	errs = inWorkspaces(ctx, db.App, []scopedStmt{{wss: wss[:2], sql: `UPDATE outbox_events SET last_error = 'x'`}})
	require.NoError(t, errs[0])
	var touched []string
	rows, err := db.Owner.Query(ctx, `SELECT DISTINCT workspace_id::text FROM outbox_events WHERE last_error = 'x' ORDER BY 1`)
	require.NoError(t, err)
	touched, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	want := []string{wss[0].String(), wss[1].String()}
	slices.Sort(want)
	require.Equal(t, want, touched)
	for _, c := range db.App.AcquireAllIdle(ctx) {
		gotWS, n := sessionScope(t, c.Conn())
		require.Empty(t, gotWS)
		require.Zero(t, n, "the list ends with its transaction")
		c.Release()
	}
}

// A round claims at most RoundEvents events, shared among its workspaces, and requeues the
// workspaces that filled their share: every event is still delivered, once.
func TestRoundEventsBoundsARound(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	wss := []uuid.UUID{createWorkspace(t, db), createWorkspace(t, db), createWorkspace(t, db), createWorkspace(t, db)}
	ids := bulkInsert(t, db, wss, 100)
	var mu sync.Mutex
	largest := 0
	rec := &recorder{fail: func(msgs []*message.Message) error {
		mu.Lock()
		largest = max(largest, len(msgs))
		mu.Unlock()
		return nil
	}}
	cfg := fastConfig()
	cfg.BatchSize, cfg.RoundEvents, cfg.RoundWorkspaces = 100, 40, 4
	startDispatcher(t, db, cfg, PublisherMap{testQueue: rec})
	waitFor(t, 20*time.Second, "all dispatched", func() bool { return statusCounts(t, db)[StatusDispatched] == len(ids) })
	require.Equal(t, len(ids), rec.count(), "each event once")
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, largest, 40, "no round publishes more than RoundEvents")
	require.Positive(t, largest)
}
