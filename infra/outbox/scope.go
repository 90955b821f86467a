package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// scopeSQL scopes the rest of its transaction to one workspace and no user, as
// postgres.InTx does, and lets it commit without waiting for the WAL flush. Local
// settings (set_config's third argument) end with the transaction.
//
// synchronous_commit = off is safe for the dispatcher's own transactions only, and only
// because delivery is at least once: a server crash can lose the last such commits (never
// out of order, never half of one), which undoes a claim (the rows are due again: published
// again under the same id), a mark (published again after the lease) or a release (the lease
// expires). No event is lost, none published while another claim holds it. The business
// transactions that write outbox rows keep the server's durable commit.
const scopeSQL = `SELECT set_config('app.workspace_id', $1, true), set_config('app.user_id', '', true),
	set_config('synchronous_commit', 'off', true)`

// scopeOf is the app.workspace_id value of ws; uuid.Nil scopes to no workspace (no rows, as
// postgres.InTx).
func scopeOf(ws uuid.UUID) string {
	if ws == uuid.Nil {
		return ""
	}
	return ws.String()
}

// scopedStmt is one statement to run in a transaction of its own, scoped to one workspace.
type scopedStmt struct {
	ws   uuid.UUID
	sql  string
	args []any
	// read, when not nil, consumes the statement's rows (it need not close them).
	read func(pgx.Rows) error
}

// inWorkspaces runs each statement in an RLS transaction of its own, scoped to its
// workspace, all in one round trip. errs[i] is nil when stmts[i] committed and its rows were
// read; rows its read saw are to be acted on only then. A failing read of our own does not
// undo what the server ran: that group commits (for a claim, its rows wait for their lease to
// expire) and the later groups run.
//
// It sends one batch of [BEGIN, scopeSQL(ws), stmt, COMMIT] per statement. An explicit
// BEGIN/COMMIT inside the pipeline makes each group its own transaction: the earlier ones stay
// committed whatever happens later. When a statement fails, PostgreSQL skips everything up to
// the batch's Sync, so that statement and every later one fail (their errs say so) and the
// failed transaction is still open on the connection: inWorkspaces then rolls it back, on the
// same connection, before the connection is released (a pool would close a connection left
// in a transaction).
func inWorkspaces(ctx context.Context, pool *pgxpool.Pool, stmts []scopedStmt) []error {
	errs := make([]error, len(stmts))
	if len(stmts) == 0 {
		return errs
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer conn.Release()
	b := &pgx.Batch{}
	for _, st := range stmts {
		b.Queue("BEGIN")
		b.Queue(scopeSQL, scopeOf(st.ws))
		b.Queue(st.sql, st.args...)
		b.Queue("COMMIT")
	}
	br := conn.SendBatch(ctx, b)
	var failed error // a server-side failure: PostgreSQL skips the rest of the batch
	for i, st := range stmts {
		if failed != nil {
			errs[i] = fmt.Errorf("not run: an earlier transaction of its round trip failed: %w", failed)
			continue
		}
		committed, err := readScoped(br, st.read)
		errs[i] = err
		if !committed {
			failed = err
		}
	}
	_ = br.Close() // every group's outcome is already in errs
	if conn.Conn().PgConn().TxStatus() != 'I' {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return errs
}

// readScoped reads the results of one [BEGIN, scope, stmt, COMMIT] group. committed reports
// whether the server acknowledged its COMMIT; err is the group's first failure. A failure of
// read alone (ours, not the server's) leaves the group committed and the batch running.
func readScoped(br pgx.BatchResults, read func(pgx.Rows) error) (committed bool, err error) {
	if _, err := br.Exec(); err != nil { // BEGIN
		return false, err
	}
	if _, err := br.Exec(); err != nil { // scope
		return false, err
	}
	rows, err := br.Query()
	if err != nil {
		return false, err
	}
	var readErr error
	if read != nil {
		readErr = read(rows)
	}
	rows.Close()
	if readErr == nil {
		readErr = rows.Err() // a server error while streaming the rows, or a Scan error
	}
	tag, err := br.Exec() // COMMIT
	switch {
	case err != nil:
		return false, errors.Join(readErr, err)
	case tag.String() != "COMMIT":
		return false, errors.Join(readErr, fmt.Errorf("transaction not committed (%s)", tag))
	}
	return true, readErr
}
